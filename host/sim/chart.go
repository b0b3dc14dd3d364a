package sim

import (
	"bytes"
	"fmt"
	"html"
	"image/color"
	"math"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The timeline chart of one run: gonum/plot panels stacked over one time
// axis, drawn to SVG (vg/vgsvg) and inlined in the HTML page. Sizes are in
// points; the page scales the SVG to its width.
const (
	chartWidth  = 10 * vg.Inch
	legendWidth = 1.3 * vg.Inch  // the column of legends on the right
	deviceH     = 1.5 * vg.Inch  // a GPU's memory panel
	laneH       = 0.24 * vg.Inch // a model's lane, without GPUs
	queueH      = 1.0 * vg.Inch
	swapsH      = 0.8 * vg.Inch
	xAxisH      = 0.4 * vg.Inch // the bottom panel's tick labels and axis label

	// maxQueuePoints is the most queue points drawn as they are; above,
	// queueSteps keeps the envelope of queueBuckets stretches of time.
	maxQueuePoints = 1200
	queueBuckets   = 600

	// minBlockWidth: a residency narrower than this on the chart is
	// merged into the one of the same model it touches.
	minBlockWidth = 0.5 * vg.Millimeter

	bytesPerGiB = 1 << 30
)

// sans is the charts' typeface; the page's style sheet falls back to
// Arial and Helvetica (the same metrics) where Liberation is not installed.
var sans = font.Font{Typeface: "Liberation", Variant: "Sans"}

var (
	axisGray  = color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff}
	gridGray  = color.RGBA{R: 0xe4, G: 0xe4, B: 0xe4, A: 0xff}
	queueBlue = color.RGBA{R: 0x2b, G: 0x5c, B: 0x8a, A: 0xff}
	queueFill = color.RGBA{R: 0xc9, G: 0xd9, B: 0xea, A: 0xff}
	neutral   = color.RGBA{R: 0x80, G: 0x80, B: 0x80, A: 0xff}
)

// panel is one plot of a timeline chart, its height and the legend beside it.
type panel struct {
	plot   *plot.Plot
	height vg.Length
	legend plot.Legend
}

// timelineSVG draws run's timeline as one inline SVG element: a memory
// panel per GPU (or a lane per model without one), the number of callers
// held, and the swaps, over the time axis [0, xmax] shared by every run.
// gonum/plot reports what it cannot draw by panicking; that is returned as
// an error, so a report that cannot be drawn does not take down a command
// that has other results to write.
func timelineSVG(run *Result, colors *palette, xmax float64, label string) (svg string, err error) {
	defer func() {
		if p := recover(); p != nil {
			svg, err = "", fmt.Errorf("sim: drawing the timeline: %v", p)
		}
	}()
	xmax = max(xmax, 1)
	var panels []panel
	for _, pl := range layoutMemory(run.Timeline) {
		panels = append(panels, memoryPanel(pl, colors, xmax))
	}
	if len(panels) == 0 { // nothing was ever loaded
		panels = append(panels, memoryPanel(panelLayout{dev: -1}, colors, xmax))
	}
	key := &panels[0].legend // the states, beside the first memory panel
	key.Add("ready", swatch{colors.state(neutral, "ready")})
	key.Add("starting", swatch{colors.state(neutral, "starting")})
	key.Add("stopping", swatch{colors.state(neutral, "stopping")})
	panels = append(panels, queuePanel(run.Timeline.Queue, xmax), swapsPanel(run.Timeline.Swaps, colors, xmax))
	last := panels[len(panels)-1].plot
	last.X.Tick.Marker = timeTicks{labels: true}
	last.X.Label.Text = "virtual time"
	panels[len(panels)-1].height += xAxisH

	var height vg.Length
	for _, p := range panels {
		height += p.height
	}
	cv := vgsvg.New(chartWidth, height)
	dc := draw.New(cv)
	plots := draw.Crop(dc, 0, -legendWidth, 0, 0)

	// Each panel's tile, top to bottom; then every data area is given the
	// same left and right edges, so that the panels share one time axis.
	tiles := make([]draw.Canvas, len(panels))
	top := plots.Max.Y
	var left, right vg.Length
	for i, p := range panels {
		tiles[i] = plots
		tiles[i].Max.Y, tiles[i].Min.Y = top, top-p.height
		top -= p.height
		da := p.plot.DataCanvas(tiles[i])
		left = max(left, da.Min.X-tiles[i].Min.X)
		right = max(right, tiles[i].Max.X-da.Max.X)
	}
	for i, p := range panels {
		da := p.plot.DataCanvas(tiles[i])
		t := draw.Crop(tiles[i], left-(da.Min.X-tiles[i].Min.X), -(right - (tiles[i].Max.X - da.Max.X)), 0, 0)
		p.plot.Draw(t)
		da = p.plot.DataCanvas(t)
		beside := draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: dc.Max.X - legendWidth + 6, Y: da.Min.Y},
			Max: vg.Point{X: dc.Max.X, Y: da.Max.Y},
		}}
		p.legend.Draw(beside)
	}

	var buf bytes.Buffer
	if _, err := cv.WriteTo(&buf); err != nil {
		return "", err
	}
	return inlineSVG(buf.String(), chartWidth, height, label)
}

// inlineSVG makes vgsvg's standalone document an element of an HTML page:
// the XML prologue, the comment and the namespace declarations (an
// HTML parser needs none) are replaced by an opening tag with a viewBox,
// so the page can scale it, and an accessible label.
func inlineSVG(doc string, w, h vg.Length, label string) (string, error) {
	i := strings.Index(doc, "<svg")
	if i < 0 {
		return "", fmt.Errorf("sim: the chart renderer wrote no <svg> element")
	}
	j := strings.IndexByte(doc[i:], '>')
	if j < 0 {
		return "", fmt.Errorf("sim: the chart renderer wrote an unterminated <svg> tag")
	}
	head := fmt.Sprintf(`<svg class="chart" viewBox="0 0 %s %s" role="img" aria-label="%s">`,
		pts(w), pts(h), html.EscapeString(label))
	return head + doc[i+j+1:], nil
}

func pts(l vg.Length) string { return strconv.FormatFloat(l.Points(), 'g', 6, 64) }

// newPanel is a plot over [0, xmax] with the chart's fonts and sizes,
// vertical grid lines at the time ticks and no tick labels on the time
// axis (the bottom panel has them).
func newPanel(xmax float64) *plot.Plot {
	p := plot.New()
	for _, ax := range []*plot.Axis{&p.X, &p.Y} {
		ax.Label.TextStyle.Font = font.From(sans, 9)
		ax.Label.TextStyle.Color = axisGray
		ax.Tick.Label.Font = font.From(sans, 8)
		ax.Tick.Label.Color = axisGray
		ax.Tick.Length = 3
		ax.Tick.Color = axisGray
		ax.Color = axisGray
		ax.Padding = 0
	}
	p.X.Min, p.X.Max = 0, xmax
	p.X.Tick.Marker = timeTicks{}
	grid := plotter.NewGrid()
	grid.Horizontal.Color = nil
	grid.Vertical.Color = gridGray
	grid.Vertical.Width = 0.5
	p.Add(grid)
	return p
}

func newLegend() plot.Legend {
	l := plot.NewLegend()
	l.TextStyle.Font = font.From(sans, 8)
	l.TextStyle.Color = axisGray
	l.Top, l.Left = true, true
	l.ThumbnailWidth = 12
	l.Padding = 2
	return l
}

// memoryPanel draws a device's residencies by memory offset (GiB), or
// lanes of models without a device.
func memoryPanel(pl panelLayout, colors *palette, xmax float64) panel {
	p := newPanel(xmax)
	h := deviceH
	if pl.dev >= 0 {
		p.Add(&blocks{blocks: pl.blocks, colors: colors, scale: 1.0 / bytesPerGiB})
		p.Y.Min, p.Y.Max = 0, float64(pl.bytes)/bytesPerGiB
		for _, b := range pl.blocks {
			p.Y.Max = max(p.Y.Max, b.hi/bytesPerGiB)
		}
		p.Y.Max = max(p.Y.Max, 1)
		p.Y.Label.Text = fmt.Sprintf("GPU %d (GiB)", pl.dev)
		p.Y.Tick.Marker = countTicks{}
	} else {
		p.Add(&blocks{blocks: pl.blocks, colors: colors, scale: 1})
		n := len(pl.lanes)
		ticks := make(plot.ConstantTicks, n)
		for i, m := range pl.lanes {
			ticks[i] = plot.Tick{Value: float64(n - 1 - i), Label: m}
		}
		p.Y.Tick.Marker = ticks
		p.Y.Tick.Length = 0
		p.Y.Min, p.Y.Max = -0.5, max(float64(n)-0.5, 0.5)
		p.Y.Label.Text = "models"
		h = max(deviceH*2/3, laneH*vg.Length(n))
	}
	return panel{plot: p, height: h, legend: newLegend()}
}

// queuePanel draws the number of callers held as a filled step line.
func queuePanel(q []Point, xmax float64) panel {
	p := newPanel(xmax)
	xys := queueSteps(q, xmax)
	line, err := plotter.NewLine(xys)
	if err != nil { // only for NaN or infinite values
		line = &plotter.Line{}
	}
	line.StepStyle = plotter.PostStep
	line.Color = queueBlue
	line.Width = 0.8
	line.FillColor = queueFill
	p.Add(line)
	p.X.Min, p.X.Max = 0, xmax
	top := 0
	for _, pt := range q {
		top = max(top, pt.V)
	}
	p.Y.Min, p.Y.Max = 0, math.Max(1, float64(top)*1.08)
	p.Y.Tick.Marker = countTicks{}
	p.Y.Label.Text = "callers held"
	l := newLegend()
	l.Add("queued or loading", line)
	return panel{plot: p, height: queueH, legend: l}
}

// queueSteps is q as the vertices of a step line from 0 to xmax. When q
// has more than maxQueuePoints, time is cut into queueBuckets stretches
// (about a point of the chart each) and a stretch is drawn by its highest
// value, from its first change on, and its last value: the envelope, and
// so every peak, stays; only dips shorter than a point go.
func queueSteps(q []Point, xmax float64) plotter.XYs {
	xys := plotter.XYs{{X: 0, Y: 0}}
	add := func(t float64, v int) {
		if n := len(xys); xys[n-1].Y != float64(v) {
			xys = append(xys, plotter.XY{X: t, Y: float64(v)})
		}
	}
	if len(q) <= maxQueuePoints {
		for _, pt := range q {
			add(pt.T, pt.V)
		}
	} else {
		width := xmax / queueBuckets
		for i := 0; i < len(q); {
			b := math.Floor(q[i].T / width)
			j, top := i+1, q[i].V
			for ; j < len(q) && math.Floor(q[j].T/width) == b; j++ {
				top = max(top, q[j].V)
			}
			add(q[i].T, top)
			add(q[j-1].T, q[j-1].V)
			i = j
		}
	}
	if last := xys[len(xys)-1]; last.X < xmax {
		xys = append(xys, plotter.XY{X: xmax, Y: last.Y})
	}
	return xys
}

// swapsPanel draws each swap: a filled triangle in the target's colour
// for a cold load, an open one for a swap that loaded nothing, and a cross
// in the evicted model's colour for each model it stopped.
func swapsPanel(swaps []Swap, colors *palette, xmax float64) panel {
	p := newPanel(xmax)
	var loads, evicts plotter.XYs
	var loadStyle, evictStyle []draw.GlyphStyle
	for _, s := range swaps {
		shape := draw.GlyphDrawer(draw.PyramidGlyph{})
		if !s.Cold {
			shape = draw.TriangleGlyph{}
		}
		loads = append(loads, plotter.XY{X: s.T, Y: 1})
		loadStyle = append(loadStyle, draw.GlyphStyle{Color: colors.of(s.Target), Radius: 3, Shape: shape})
		for j, m := range s.Evict {
			evicts = append(evicts, plotter.XY{X: s.T, Y: -0.3 * float64(j)})
			evictStyle = append(evictStyle, draw.GlyphStyle{Color: colors.of(m), Radius: 3, Shape: cross{}})
		}
	}
	for _, set := range []struct {
		xys   plotter.XYs
		style []draw.GlyphStyle
	}{{loads, loadStyle}, {evicts, evictStyle}} {
		if len(set.xys) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(set.xys)
		if err != nil {
			continue
		}
		style := set.style
		sc.GlyphStyleFunc = func(i int) draw.GlyphStyle { return style[i] }
		p.Add(sc)
	}
	p.X.Min, p.X.Max = 0, xmax
	p.Y.Min, p.Y.Max = -1.1, 1.6
	p.Y.Tick.Marker = plot.ConstantTicks{{Value: 1, Label: "loads"}, {Value: 0, Label: "evictions"}}
	p.Y.Tick.Length = 0
	p.Y.Label.Text = "swaps"
	l := newLegend()
	l.Add("cold load", glyph{draw.GlyphStyle{Color: neutral, Radius: 3, Shape: draw.PyramidGlyph{}}})
	l.Add("warm swap", glyph{draw.GlyphStyle{Color: neutral, Radius: 3, Shape: draw.TriangleGlyph{}}})
	l.Add("eviction", glyph{draw.GlyphStyle{Color: neutral, Radius: 3, Shape: cross{}}})
	return panel{plot: p, height: swapsH, legend: l}
}

// blocks is a plot.Plotter of residency rectangles, coloured by model
// and lighter while starting or stopping, the model's name written in
// those wide enough. y values are multiplied by scale.
type blocks struct {
	blocks []block
	colors *palette
	scale  float64
}

// Plot implements plot.Plotter. A block narrower than minBlockWidth that
// touches one of the same model at the same height is merged into it, so
// a long replay is not drawn as thousands of invisible slivers.
func (b *blocks) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	type rect struct {
		model, state string
		x0, x1       vg.Length
		y0, y1       vg.Length
	}
	type lane struct {
		model string
		y0    vg.Length
	}
	var rects []rect
	lastOf := map[lane]int{} // index of a lane's last rect
	for _, bl := range b.blocks {
		r := rect{model: bl.model, state: bl.state, x0: trX(bl.from), x1: trX(bl.to), y0: trY(bl.lo * b.scale), y1: trY(bl.hi * b.scale)}
		key := lane{r.model, r.y0}
		if i, ok := lastOf[key]; ok {
			prev := &rects[i]
			if r.x0-prev.x1 < minBlockWidth/4 && prev.y1 == r.y1 &&
				(prev.state == r.state || prev.x1-prev.x0 < minBlockWidth || r.x1-r.x0 < minBlockWidth) {
				if r.x1-r.x0 > prev.x1-prev.x0 {
					prev.state = r.state
				}
				prev.x1 = max(prev.x1, r.x1)
				continue
			}
		}
		lastOf[key] = len(rects)
		rects = append(rects, r)
	}
	sty := text.Style{Font: font.From(sans, 8), XAlign: draw.XCenter, YAlign: draw.YCenter, Handler: plt.TextHandler}
	for _, r := range rects {
		base := b.colors.of(r.model)
		x1 := max(r.x1, r.x0+minBlockWidth)
		c.FillPolygon(b.colors.state(base, r.state), []vg.Point{{X: r.x0, Y: r.y0}, {X: x1, Y: r.y0}, {X: x1, Y: r.y1}, {X: r.x0, Y: r.y1}})
		if r.state == "ready" && r.x1-r.x0 > sty.Width(r.model)+6 && r.y1-r.y0 > sty.Height(r.model)+2 {
			sty.Color = textOn(base)
			c.FillText(sty, vg.Point{X: (r.x0 + r.x1) / 2, Y: (r.y0 + r.y1) / 2}, r.model)
		}
	}
}

// swatch is a legend thumbnail: a filled square.
type swatch struct{ color.Color }

// Thumbnail implements plot.Thumbnailer.
func (s swatch) Thumbnail(c *draw.Canvas) {
	r := c.Rectangle
	c.FillPolygon(s.Color, []vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}})
}

// glyph is a legend thumbnail: one glyph in the middle.
type glyph struct{ draw.GlyphStyle }

// Thumbnail implements plot.Thumbnailer.
func (g glyph) Thumbnail(c *draw.Canvas) { c.DrawGlyph(g.GlyphStyle, c.Center()) }

// cross is an X bolder than draw.CrossGlyph, to show its colour.
type cross struct{}

// DrawGlyph implements draw.GlyphDrawer.
func (cross) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	c.SetLineStyle(draw.LineStyle{Color: sty.Color, Width: 1.4})
	r := sty.Radius * math.Sqrt2 / 2
	var p vg.Path
	p.Move(vg.Point{X: pt.X - r, Y: pt.Y - r})
	p.Line(vg.Point{X: pt.X + r, Y: pt.Y + r})
	p.Move(vg.Point{X: pt.X - r, Y: pt.Y + r})
	p.Line(vg.Point{X: pt.X + r, Y: pt.Y - r})
	c.Stroke(p)
}

// timeTicks marks virtual time at a round step (1 s … 1 h and up), at
// most 9 ticks, labelled 0, 30s, 1m, 1m30s, 1h…, or unlabelled.
type timeTicks struct{ labels bool }

// Ticks implements plot.Ticker.
func (t timeTicks) Ticks(lo, hi float64) []plot.Tick {
	step := 1.0
	for _, s := range []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400} {
		step = s
		if (hi-lo)/s <= 8 {
			break
		}
	}
	for (hi-lo)/step > 8 {
		step *= 2
	}
	var ticks []plot.Tick
	for i := math.Ceil(lo / step); i*step <= hi; i++ {
		tk := plot.Tick{Value: i * step}
		if t.labels {
			tk.Label = clock(i * step)
		}
		ticks = append(ticks, tk)
	}
	return ticks
}

// clock writes whole seconds as 0, 45s, 2m, 2m30s, 1h, 1h5m.
func clock(s float64) string {
	n := int64(math.Round(s))
	if n == 0 {
		return "0"
	}
	var b strings.Builder
	if h := n / 3600; h > 0 {
		fmt.Fprintf(&b, "%dh", h)
	}
	if m := n % 3600 / 60; m > 0 {
		fmt.Fprintf(&b, "%dm", m)
	}
	if s := n % 60; s > 0 {
		fmt.Fprintf(&b, "%ds", s)
	}
	return b.String()
}

// countTicks marks whole numbers at a step of 1, 2 or 5 × 10ⁿ, at most 5.
type countTicks struct{}

// Ticks implements plot.Ticker.
func (countTicks) Ticks(lo, hi float64) []plot.Tick {
	step := 1.0
	for i := 0; (hi-lo)/step > 5; i++ {
		step = []float64{1, 2, 5}[i%3] * math.Pow10(i/3)
	}
	var ticks []plot.Tick
	for i := math.Ceil(lo / step); i*step <= hi; i++ {
		ticks = append(ticks, plot.Tick{Value: i * step, Label: strconv.FormatFloat(i*step, 'f', -1, 64)})
	}
	return ticks
}
