package web

import (
	"html"
	"html/template"
	"strconv"
	"strings"
	"time"

	"github.com/tollgatehq/tollgate/internal/numfmt"
)

// Series is one stacked layer of a bar chart: one value per day.
type Series struct {
	Name   string
	Values []int64
}

// Chart is a per-day bar chart drawn on the server: SVG for the eye, the
// same numbers as a table for screen readers and for people who want them.
type Chart struct {
	Label  string // what the chart shows, e.g. "requests per day"
	Days   []time.Time
	Series []Series
	Max    int64 // the largest day total
	Total  int64
	SVG    template.HTML
}

// Rows returns the table view: one row per day with each series' value.
func (c Chart) Rows() []ChartRow {
	out := make([]ChartRow, len(c.Days))
	for i, d := range c.Days {
		r := ChartRow{Day: d}
		for _, s := range c.Series {
			r.Values = append(r.Values, s.Values[i])
			r.Total += s.Values[i]
		}
		out[i] = r
	}
	return out
}

// ChartRow is one day of a chart's table.
type ChartRow struct {
	Day    time.Time
	Values []int64
	Total  int64
}

// Chart geometry in viewBox units; the SVG scales to its container's width.
const (
	chartW    = 600
	chartH    = 160
	chartTop  = 6
	chartBase = 150
)

// newChart computes totals and draws the SVG. today, when within days, is
// marked so that the part of the period still ahead reads as such.
func newChart(label string, days []time.Time, series []Series, today time.Time) Chart {
	c := Chart{Label: label, Days: days, Series: series}
	totals := make([]int64, len(days))
	for _, s := range series {
		for i, v := range s.Values {
			totals[i] += v
			c.Total += v
		}
	}
	for _, t := range totals {
		c.Max = max(c.Max, t)
	}
	c.SVG = drawBars(c, totals, today)
	return c
}

func drawBars(c Chart, totals []int64, today time.Time) template.HTML {
	var b strings.Builder
	b.Grow(256 + len(c.Days)*len(c.Series)*120)
	b.WriteString(`<svg class="chart" viewBox="0 0 `)
	b.WriteString(strconv.Itoa(chartW))
	b.WriteString(` `)
	b.WriteString(strconv.Itoa(chartH))
	b.WriteString(`" preserveAspectRatio="none" aria-hidden="true" focusable="false">`)
	// Grid lines at the quarters of the largest day.
	for i := 0; i <= 4; i++ {
		y := chartBase - (chartBase-chartTop)*i/4
		b.WriteString(`<line class="grid" x1="0" x2="` + strconv.Itoa(chartW) + `" y1="` + strconv.Itoa(y) + `" y2="` + strconv.Itoa(y) + `"/>`)
	}
	n := len(c.Days)
	if n == 0 {
		b.WriteString(`</svg>`)
		return template.HTML(b.String())
	}
	slot := float64(chartW) / float64(n)
	barW := slot * 0.72
	span := float64(chartBase - chartTop)
	todayDay := today.UTC().Truncate(24 * time.Hour)
	for i, d := range c.Days {
		x := float64(i)*slot + (slot-barW)/2
		if d.After(todayDay) {
			// Days still ahead: a faint placeholder so the period's length shows.
			b.WriteString(`<rect class="ahead" x="` + f1(x) + `" y="` + strconv.Itoa(chartBase-2) + `" width="` + f1(barW) + `" height="2"/>`)
			continue
		}
		y := float64(chartBase)
		for si, s := range c.Series {
			v := s.Values[i]
			if v <= 0 || c.Max == 0 {
				continue
			}
			h := span * float64(v) / float64(c.Max)
			if h < 1 {
				h = 1
			}
			y -= h
			b.WriteString(`<rect class="s` + strconv.Itoa(si%5) + `" x="` + f1(x) + `" y="` + f1(y) + `" width="` + f1(barW) + `" height="` + f1(h) + `"><title>`)
			b.WriteString(html.EscapeString(d.Format("2 Jan") + " · " + s.Name + ": " + numfmt.Int(v)))
			b.WriteString(`</title></rect>`)
		}
		if d.Equal(todayDay) {
			b.WriteString(`<rect class="today" x="` + f1(x) + `" y="` + strconv.Itoa(chartBase+2) + `" width="` + f1(barW) + `" height="4"/>`)
		}
	}
	b.WriteString(`<line class="axis" x1="0" x2="` + strconv.Itoa(chartW) + `" y1="` + strconv.Itoa(chartBase) + `" y2="` + strconv.Itoa(chartBase) + `"/>`)
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // every text inside was escaped above
}

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// meterBar draws one meter's used/limit bar; over the limit the bar is full
// and marked.
func meterBar(pct float64, over bool) template.HTML {
	w := pct
	if w > 100 || over {
		w = 100
	}
	class := "fill"
	switch {
	case over:
		class = "fill over"
	case pct >= 80:
		class = "fill warn"
	}
	return template.HTML(`<svg class="bar" viewBox="0 0 100 8" preserveAspectRatio="none" aria-hidden="true" focusable="false">` +
		`<rect class="track" x="0" y="0" width="100" height="8" rx="2"/>` +
		`<rect class="` + class + `" x="0" y="0" width="` + f1(w) + `" height="8" rx="2"/></svg>`)
}

// days lists the UTC days that [start, end) touches.
func days(start, end time.Time) []time.Time {
	var out []time.Time
	d := start.UTC().Truncate(24 * time.Hour)
	for d.Before(end) && len(out) < 62 {
		out = append(out, d)
		d = d.AddDate(0, 0, 1)
	}
	return out
}
