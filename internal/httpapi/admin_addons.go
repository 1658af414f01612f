package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/tollgatehq/tollgate/internal/catalogue"
)

// Add-on grants: what a Stripe price grants as a subscription item beside
// the plan's (extra quota per meter, features, × the item's quantity).

func (s *Server) handleListAddons() echo.HandlerFunc {
	return func(c echo.Context) error {
		as, err := s.Catalogue.ListAddons(c.Request().Context())
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, map[string]any{"addons": as})
	}
}

func (s *Server) handleGetAddon() echo.HandlerFunc {
	return func(c echo.Context) error {
		a, err := s.Catalogue.GetAddon(c.Request().Context(), c.Param("price_id"))
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, a)
	}
}

// handlePutAddon creates (201) or replaces (200) the grant of a price.
func (s *Server) handlePutAddon() echo.HandlerFunc {
	return func(c echo.Context) error {
		var in catalogue.AddonInput
		if err := decodeBody(c, &in); err != nil {
			return err
		}
		a, created, err := s.Catalogue.PutAddon(c.Request().Context(), c.Param("price_id"), in)
		if err != nil {
			return err
		}
		if created {
			c.Response().Header().Set(echo.HeaderLocation, "/admin/v1/addons/"+a.StripePriceID)
			return c.JSON(http.StatusCreated, a)
		}
		return c.JSON(http.StatusOK, a)
	}
}

func (s *Server) handleDeleteAddon() echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := s.Catalogue.DeleteAddon(c.Request().Context(), c.Param("price_id")); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}
}
