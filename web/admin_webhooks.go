package web

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/notify"
)

// The console's webhook pages: endpoints listed and created (the secret
// shown once, on the answer page), edited, enabled, deleted, their secret
// rotated; per endpoint its deliveries with retry now and replay. Each
// change is audited like the admin API's.

// webhookRoutes registers the pages; their audited POSTs are declared in
// audit.Routes.
func (w *Web) webhookRoutes(e *echo.Echo, admin []echo.MiddlewareFunc) {
	e.GET("/admin/webhooks", w.handleAdminWebhooks(), admin...)
	e.POST("/admin/webhooks", w.handleAdminCreateWebhook(), admin...)
	e.GET("/admin/webhooks/:wid", w.handleAdminWebhook(), admin...)
	e.POST("/admin/webhooks/:wid", w.handleAdminEditWebhook(), admin...)
	e.POST("/admin/webhooks/:wid/delete", w.handleAdminDeleteWebhook(), admin...)
	e.POST("/admin/webhooks/:wid/rotate-secret", w.handleAdminRotateWebhook(), admin...)
	e.POST("/admin/webhooks/:wid/deliveries/:did/retry", w.handleAdminRetryDelivery(), admin...)
	e.POST("/admin/webhooks/:wid/events/:eid/replay", w.handleAdminReplayWebhookEvent(), admin...)
}

// webhookNotices are the pages' confirmations after a redirect.
var webhookNotices = map[string]string{
	"webhook":   "Webhook endpoint saved.",
	"unwebhook": "Webhook endpoint deleted, with its deliveries.",
	"retry":     "Delivery queued: it is sent now.",
	"replay":    "Event queued to be sent again, with the same webhook-id.",
}

// webhookForm is the endpoint form as typed.
type webhookForm struct {
	URL, Events, Description string
}

func readWebhookForm(c echo.Context) webhookForm {
	return webhookForm{URL: strings.TrimSpace(c.FormValue("url")), Events: c.FormValue("events"), Description: c.FormValue("description")}
}

func (f webhookForm) events() []string {
	out := []string{}
	for _, s := range strings.Split(f.Events, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

type webhooksPage struct {
	Endpoints  []notify.Endpoint
	Form       webhookForm
	Errors     []apperr.FieldError
	EventTypes []string
	// Secret is set on the answer of a create or rotate: shown this once.
	Secret   string
	SecretOf string
}

type webhookPage struct {
	Endpoint   notify.Endpoint
	Deliveries []notify.Delivery
	Form       webhookForm
	Errors     []apperr.FieldError
	Secret     string
}

// webhookFormError turns what the service refused into the form's
// errors: bad fields (400), a private address (422), no secret key (503).
func webhookFormError(err error) ([]apperr.FieldError, int, bool) {
	e, ok := apperr.As(err)
	if !ok {
		return nil, 0, false
	}
	status := map[apperr.Code]int{apperr.Invalid: http.StatusBadRequest, apperr.Unprocessable: http.StatusUnprocessableEntity,
		apperr.Unavailable: http.StatusServiceUnavailable}[e.Code]
	if status == 0 {
		return nil, 0, false
	}
	fields := e.Fields
	if len(fields) == 0 {
		fields = []apperr.FieldError{{Message: e.Message}}
	}
	return fields, status, true
}

func (w *Web) webhooksOr404() (*notify.Service, error) {
	if w.Webhooks == nil {
		return nil, apperr.New(apperr.NotFound, "webhooks are not configured on this server")
	}
	return w.Webhooks, nil
}

func (w *Web) renderWebhooks(c echo.Context, status int, d webhooksPage, notice string) error {
	n, err := w.webhooksOr404()
	if err != nil {
		return err
	}
	if d.Endpoints, err = n.List(c.Request().Context()); err != nil {
		return err
	}
	d.EventTypes = notify.EventTypes
	if d.Secret != "" {
		c.Response().Header().Set("Cache-Control", "no-store")
	}
	return w.render(c, status, "admin_webhooks", page{Title: "Webhooks", Nav: "webhooks", Notice: notice, Data: d})
}

func (w *Web) handleAdminWebhooks() echo.HandlerFunc {
	return func(c echo.Context) error {
		return w.renderWebhooks(c, http.StatusOK, webhooksPage{}, webhookNotices[c.QueryParam("done")])
	}
}

// handleAdminCreateWebhook answers with the list and the new secret, shown
// on this page only (never after a redirect).
func (w *Web) handleAdminCreateWebhook() echo.HandlerFunc {
	return func(c echo.Context) error {
		n, err := w.webhooksOr404()
		if err != nil {
			return err
		}
		f := readWebhookForm(c)
		ep, err := n.Create(c.Request().Context(), notify.EndpointInput{URL: f.URL, Events: f.events(), Description: f.Description})
		if fields, status, ok := webhookFormError(err); ok {
			return w.renderWebhooks(c, status, webhooksPage{Form: f, Errors: fields}, "")
		}
		if err != nil {
			return err
		}
		c.Set(ctxTarget, ep.ID)
		return w.renderWebhooks(c, http.StatusOK, webhooksPage{Secret: ep.Secret, SecretOf: ep.ID}, "Webhook endpoint added.")
	}
}

func (w *Web) renderWebhook(c echo.Context, status int, d webhookPage, notice string) error {
	n, err := w.webhooksOr404()
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if d.Endpoint, err = n.Get(ctx, c.Param("wid")); err != nil {
		return err
	}
	if d.Deliveries, err = n.Deliveries(ctx, d.Endpoint.ID, 100, 0); err != nil {
		return err
	}
	if d.Form == (webhookForm{}) {
		d.Form = webhookForm{URL: d.Endpoint.URL, Events: strings.Join(d.Endpoint.Events, ", "), Description: d.Endpoint.Description}
	}
	if d.Secret != "" {
		c.Response().Header().Set("Cache-Control", "no-store")
	}
	return w.render(c, status, "admin_webhook", page{Title: "Webhook endpoint", Nav: "webhooks", Notice: notice, Data: d})
}

func (w *Web) handleAdminWebhook() echo.HandlerFunc {
	return func(c echo.Context) error {
		return w.renderWebhook(c, http.StatusOK, webhookPage{}, webhookNotices[c.QueryParam("done")])
	}
}

// handleAdminEditWebhook changes the URL and events, or (enabled=on/off
// alone) enables or disables the endpoint.
func (w *Web) handleAdminEditWebhook() echo.HandlerFunc {
	return func(c echo.Context) error {
		n, err := w.webhooksOr404()
		if err != nil {
			return err
		}
		id := c.Param("wid")
		var p notify.EndpointPatch
		var f webhookForm
		if v := c.FormValue("enabled"); v != "" {
			on := v == "on"
			p.Enabled = &on
		} else {
			f = readWebhookForm(c)
			ev := f.events()
			p.URL, p.Events = &f.URL, &ev
		}
		_, err = n.Patch(c.Request().Context(), id, p)
		if fields, status, ok := webhookFormError(err); ok {
			return w.renderWebhook(c, status, webhookPage{Form: f, Errors: fields}, "")
		}
		if err != nil {
			return err
		}
		c.Set(ctxTarget, id)
		return c.Redirect(http.StatusSeeOther, "/admin/webhooks/"+id+"?done=webhook")
	}
}

func (w *Web) handleAdminDeleteWebhook() echo.HandlerFunc {
	return func(c echo.Context) error {
		n, err := w.webhooksOr404()
		if err != nil {
			return err
		}
		if err := n.Delete(c.Request().Context(), c.Param("wid")); err != nil {
			return err
		}
		c.Set(ctxTarget, c.Param("wid"))
		return c.Redirect(http.StatusSeeOther, "/admin/webhooks?done=unwebhook")
	}
}

// handleAdminRotateWebhook shows the new secret on its answer page only.
func (w *Web) handleAdminRotateWebhook() echo.HandlerFunc {
	return func(c echo.Context) error {
		n, err := w.webhooksOr404()
		if err != nil {
			return err
		}
		ep, err := n.RotateSecret(c.Request().Context(), c.Param("wid"))
		if err != nil {
			return err
		}
		c.Set(ctxTarget, ep.ID)
		return w.renderWebhook(c, http.StatusOK, webhookPage{Secret: ep.Secret}, "New secret made; the old one keeps signing beside it for 24 hours.")
	}
}

func (w *Web) handleAdminRetryDelivery() echo.HandlerFunc {
	return func(c echo.Context) error {
		n, err := w.webhooksOr404()
		if err != nil {
			return err
		}
		did, err := strconv.ParseInt(c.Param("did"), 10, 64)
		if err != nil {
			return notify.ErrDeliveryNotFound
		}
		if _, err := n.RetryNow(c.Request().Context(), c.Param("wid"), did); err != nil {
			if fields, status, ok := formError(err); ok { // 409: delivered
				return w.renderWebhook(c, status, webhookPage{Errors: fields}, "")
			}
			return err
		}
		c.Set(ctxTarget, c.Param("wid"))
		return c.Redirect(http.StatusSeeOther, "/admin/webhooks/"+c.Param("wid")+"?done=retry")
	}
}

func (w *Web) handleAdminReplayWebhookEvent() echo.HandlerFunc {
	return func(c echo.Context) error {
		n, err := w.webhooksOr404()
		if err != nil {
			return err
		}
		if _, err := n.Replay(c.Request().Context(), c.Param("wid"), c.Param("eid")); err != nil {
			return err
		}
		c.Set(ctxTarget, c.Param("wid"))
		return c.Redirect(http.StatusSeeOther, "/admin/webhooks/"+c.Param("wid")+"?done=replay")
	}
}
