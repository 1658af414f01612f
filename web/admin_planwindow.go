package web

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/numfmt"
	"github.com/tollgatehq/tollgate/limiter"
)

// windowRow is one row of the plan form's window editor ("5,000 an hour,
// fixed"). Its fields are posted as windows[i].name, .limit, .length, .kind
// and .remove. The service checks the values; its errors name the window
// by its place in the list it was given (windows[1].length), which is
// mapped back to the form's row.
type windowRow struct {
	Name   string
	Limit  string
	Length string
	Kind   string
	Remove bool
	Errors []string
}

func (r windowRow) blank() bool { return r.Name == "" && r.Limit == "" && r.Length == "" }

const (
	// spareWindowRows are the empty rows under a plan's windows.
	spareWindowRows = 1
	// maxWindowRows bounds the rows read from a form (the service allows 10).
	maxWindowRows = 20
)

func windowRowsOf(ws []catalogue.PlanWindow) []windowRow {
	out := make([]windowRow, 0, len(ws))
	for _, w := range ws {
		out = append(out, windowRow{Name: w.Name, Limit: strconv.FormatInt(w.Limit, 10), Length: w.Length, Kind: w.Kind})
	}
	return out
}

// readWindowRows reads the window editor; posted is false for a form
// without it (a script of before windows), which leaves a plan's windows
// as they are.
func readWindowRows(c echo.Context) (rows []windowRow, posted bool) {
	posted = c.FormValue("window_rows") != ""
	n, _ := strconv.Atoi(c.FormValue("window_rows"))
	var out []windowRow
	for i := range min(max(n, 0), maxWindowRows) {
		name := func(field string) string { return "windows[" + strconv.Itoa(i) + "]." + field }
		out = append(out, windowRow{
			Name:   strings.TrimSpace(c.FormValue(name("name"))),
			Limit:  strings.TrimSpace(c.FormValue(name("limit"))),
			Length: strings.TrimSpace(c.FormValue(name("length"))),
			Kind:   strings.TrimSpace(c.FormValue(name("kind"))),
			Remove: c.FormValue(name("remove")) != "",
		})
	}
	return out, posted
}

// windowInputs turns the rows into the service's windows (the whole list:
// a plan's windows are replaced whole), skipping blank and removed rows;
// idx[j] is the form row of the service's window j. A limit that is not a
// number is the form's error; everything else is the service's to check.
// nil when the form has no window editor (windowsPosted false).
func (f *planForm) windowInputs(v *apperr.Validation) catalogue.WindowInputs {
	if !f.windowsPosted {
		return nil
	}
	out := catalogue.WindowInputs{}
	f.windowIdx = f.windowIdx[:0]
	for i := range f.Windows {
		r := &f.Windows[i]
		r.Errors = nil
		if r.Remove || r.blank() {
			continue
		}
		in := catalogue.WindowInput{Name: r.Name, Length: r.Length, Kind: r.Kind}
		if r.Limit != "" {
			n, err := strconv.ParseInt(r.Limit, 10, 64)
			if err != nil {
				msg := fmt.Sprintf("window row %d: must be a whole number", i+1)
				v.Add("windows["+strconv.Itoa(i)+"].limit", "%s", msg)
				r.Errors = append(r.Errors, msg)
			}
			in.Limit = &n
		}
		f.windowIdx = append(f.windowIdx, i)
		out = append(out, in)
	}
	return out
}

// windowErrors puts the service's errors on windows[j].field next to the
// form row of window j, naming that row in the field.
func (f *planForm) windowErrors(fe apperr.FieldError) apperr.FieldError {
	rest, ok := strings.CutPrefix(fe.Field, "windows[")
	if !ok {
		return fe
	}
	num, sub, ok := strings.Cut(rest, "]")
	j, err := strconv.Atoi(num)
	if !ok || err != nil || j < 0 || j >= len(f.windowIdx) {
		return fe
	}
	i := f.windowIdx[j]
	fe.Field = "windows[" + strconv.Itoa(i) + "]" + sub
	fe.Message = fmt.Sprintf("window row %d: %s", i+1, fe.Message)
	f.Windows[i].Errors = append(f.Windows[i].Errors, fe.Message)
	return fe
}

// windowsText is a plan's windows for the confirmation and the plan list:
// "hourly 5,000 per 1h (fixed); …".
func windowsText(ws []catalogue.PlanWindow) string {
	if len(ws) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(ws))
	for _, w := range ws {
		parts = append(parts, w.Name+" "+numfmt.Int(w.Limit)+" per "+w.Length+" ("+w.Kind+")")
	}
	return strings.Join(parts, "; ")
}

// snapshotWindowsText is windowsText of a snapshot's windows ("" none).
func snapshotWindowsText(ws []limiter.Window) string {
	if len(ws) == 0 {
		return ""
	}
	pw := make([]catalogue.PlanWindow, 0, len(ws))
	for _, w := range ws {
		kind := string(w.Kind)
		if kind == "" {
			kind = catalogue.WindowSliding
		}
		pw = append(pw, catalogue.PlanWindow{Name: w.Name, Limit: w.Limit, Length: lengthText(w.Length), Kind: kind})
	}
	return windowsText(pw)
}

func noneIfEmpty(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
