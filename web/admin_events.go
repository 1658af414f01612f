package web

// The console's Stripe events: the list (tenant by name, search by event or
// customer id, status filter, pages) and replays, one or in bulk.

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/cursor"
	"github.com/tollgatehq/tollgate/internal/numfmt"
)

const (
	eventsPerPage = 50
	// maxBulkReplay is the most events one bulk replay queues; more are
	// left failed for the next one, so one click cannot flood the queue.
	maxBulkReplay = 500
	// eventsListed is how many event ids a confirmation names.
	eventsListed = 20
)

// eventStatuses are the statuses the list filters by; "all" (or none) is
// every status.
var eventStatuses = []string{"failed", "pending", "processed", "ignored"}

type eventsPage struct {
	Status    string // "" = all
	Q         string
	Statuses  []string
	Events    []EventRow
	NextURL   string
	FirstURL  string // back to the first page, when not on it
	Failed    int64  // failed events matching the search (what "replay all" queues)
	CanReplay bool
}

// eventsQuery reads the list's filter: status, q (an evt_… or cus_… id) and
// the page's cursor; bad values are 400s naming the parameter.
func eventsQuery(c echo.Context) (eventFilter, string, *cursorAt, error) {
	var f eventFilter
	var v apperr.Validation
	status := c.QueryParam("status")
	if c.Request().Method == http.MethodPost {
		status = c.FormValue("status")
	}
	switch status {
	case "", "all":
	default:
		f.Status = status
		valid := false
		for _, s := range eventStatuses {
			valid = valid || s == status
		}
		if !valid {
			v.Add("status", "must be all, %s", strings.Join(eventStatuses, ", "))
		}
	}
	q := strings.TrimSpace(c.QueryParam("q"))
	if c.Request().Method == http.MethodPost {
		q = strings.TrimSpace(c.FormValue("q"))
	}
	switch {
	case q == "":
	case len(q) > 255 || strings.ContainsAny(q, " \t\r\n"):
		v.Add("q", "must be one event id (evt_…) or Stripe customer id (cus_…)")
	case strings.HasPrefix(q, "evt_"):
		f.ID = q
	case strings.HasPrefix(q, "cus_"):
		f.Customer = q
	default:
		v.Add("q", "search by an event id (evt_…) or a Stripe customer id (cus_…)")
	}
	var at *cursorAt
	if cs := c.QueryParam("cursor"); cs != "" {
		t, id, ok := cursor.Decode(cs)
		if !ok {
			v.Add("cursor", "is not a page link this console made")
		}
		at = &cursorAt{t: t, id: id}
	}
	return f, q, at, v.Err()
}

func (w *Web) handleAdminEvents() echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		f, q, at, err := eventsQuery(c)
		if err != nil {
			return err
		}
		d := eventsPage{Status: f.Status, Q: q, Statuses: eventStatuses, CanReplay: w.Replayer != nil}
		evs, next, err := w.store.eventPage(ctx, f, at.cursor(), eventsPerPage)
		if err != nil {
			return err
		}
		link := func(cur string) string {
			v := url.Values{}
			if f.Status != "" {
				v.Set("status", f.Status)
			}
			if q != "" {
				v.Set("q", q)
			}
			if cur != "" {
				v.Set("cursor", cur)
			}
			if len(v) == 0 {
				return "/admin/events"
			}
			return "/admin/events?" + v.Encode()
		}
		if next != "" {
			d.NextURL = link(next)
		}
		if at != nil {
			d.FirstURL = link("")
		}
		d.Events = evs
		if d.CanReplay && (f.Status == "" || f.Status == "failed") {
			if _, d.Failed, err = w.store.failedIDs(ctx, f, 0); err != nil {
				return err
			}
		}
		notice := adminNotices[c.QueryParam("done")]
		if n, err := strconv.Atoi(c.QueryParam("queued")); err == nil && n >= 0 {
			notice = plural(n, "failed event", "failed events") + " queued for replay."
			if sk, _ := strconv.Atoi(c.QueryParam("skipped")); sk > 0 {
				notice += " " + plural(sk, "event was", "events were") + " no longer failed and left alone."
			}
		}
		return w.render(c, http.StatusOK, "admin_events", page{Title: "Stripe events", Nav: "events", Notice: notice, Data: d})
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return numfmt.Int(int64(n)) + " " + many
}

// cursorAt is a decoded page cursor; nil is the first page.
type cursorAt struct {
	t  time.Time
	id string
}

// cursor is the page cursor as billing.ListEvents takes it; "" for the
// first page.
func (c *cursorAt) cursor() string {
	if c == nil {
		return ""
	}
	return cursor.Encode(c.t, c.id)
}

type eventPage struct {
	Event     EventRow
	CanReplay bool
}

func (w *Web) handleAdminEvent() echo.HandlerFunc {
	return func(c echo.Context) error {
		e, err := w.store.event(c.Request().Context(), c.Param("id"))
		if err != nil {
			return err
		}
		return w.render(c, http.StatusOK, "admin_event", page{Title: "Event " + e.ID, Nav: "events", Notice: adminNotices[c.QueryParam("done")],
			Data: eventPage{Event: e, CanReplay: w.Replayer != nil}})
	}
}

func (w *Web) handleAdminReplay() echo.HandlerFunc {
	return func(c echo.Context) error {
		if w.Replayer == nil {
			return apperr.New(apperr.NotFound, "replay is not available")
		}
		ctx := c.Request().Context()
		id := c.Param("id")
		if _, err := w.store.event(ctx, id); err != nil {
			return err
		}
		if _, err := w.Replayer.Replay(ctx, id); err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, "/admin/events/"+url.PathEscape(id)+"?done=replayed")
	}
}

// handleAdminBulkReplay replays failed events: those ticked (scope
// "selected", the id fields) or every failed event matching the list's
// search (scope "all", up to maxBulkReplay). The first POST shows how many
// and which; its confirm form names the ids, so that what is replayed is
// what was shown, less those no longer failed. Each replay is its own
// audit entry, as one replayed from the event's page.
func (w *Web) handleAdminBulkReplay() echo.HandlerFunc {
	return func(c echo.Context) error {
		if w.Replayer == nil {
			return apperr.New(apperr.NotFound, "replay is not available")
		}
		ctx := c.Request().Context()
		f, q, _, err := eventsQuery(c)
		if err != nil {
			return err
		}
		if err := c.Request().ParseForm(); err != nil {
			return apperr.Invalidf("body", "is not a form")
		}
		var ids []string
		switch c.FormValue("scope") {
		case "all":
			if ids, _, err = w.store.failedIDs(ctx, f, maxBulkReplay); err != nil {
				return err
			}
		case "selected":
			picked := c.Request().PostForm["id"]
			if len(picked) > maxBulkReplay {
				return apperr.Invalidf("id", "select at most %d events at once", maxBulkReplay)
			}
			for _, id := range picked {
				if id == "" || len(id) > 255 {
					return apperr.Invalidf("id", "%q is not an event id", id)
				}
			}
			if len(picked) == 0 {
				return apperr.Invalidf("id", "select at least one failed event")
			}
			if ids, err = w.store.failedAmong(ctx, picked); err != nil {
				return err
			}
		default:
			return apperr.Invalidf("scope", `must be "selected" or "all"`)
		}
		back := "/admin/events?" + url.Values{"status": {"failed"}, "q": {q}}.Encode()
		if len(ids) == 0 {
			return apperr.Invalidf("id", "none of these events has failed: there is nothing to replay")
		}
		if !confirmed(c) {
			d := confirmPage{
				Heading: "Replay " + plural(len(ids), "failed event", "failed events") + "?",
				Lead:    "Each event is set pending and processed again by the worker; applying an event twice changes nothing.",
				Action:  "/admin/events/replay",
				Button:  "Replay " + plural(len(ids), "event", "events"),
				Cancel:  back,
				Hidden:  []hiddenField{{"scope", "selected"}, {"status", f.Status}, {"q", q}},
				Events:  ids[:min(len(ids), eventsListed)],
				More:    max(len(ids)-eventsListed, 0),
			}
			for _, id := range ids {
				d.Hidden = append(d.Hidden, hiddenField{"id", id})
			}
			return w.renderConfirm(c, "Confirm replay", d)
		}
		queued := 0
		for _, id := range ids {
			err := w.Audit.Do(ctx, "stripe_event.replay", audit.Subject{EventID: id}, func() (audit.Subject, error) {
				_, err := w.Replayer.Replay(ctx, id)
				return audit.Subject{}, err
			})
			if err != nil {
				// The ones queued stay queued; say how far it got.
				w.log.WarnContext(ctx, "bulk replay stopped", "event_id", id, "queued", queued, "err", err)
				return err
			}
			queued++
		}
		skipped := len(c.Request().PostForm["id"]) - len(ids)
		v := url.Values{"status": {"failed"}, "queued": {strconv.Itoa(queued)}}
		if q != "" {
			v.Set("q", q)
		}
		if skipped > 0 {
			v.Set("skipped", strconv.Itoa(skipped))
		}
		return c.Redirect(http.StatusSeeOther, "/admin/events?"+v.Encode())
	}
}
