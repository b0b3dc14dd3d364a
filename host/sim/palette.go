package sim

import (
	"fmt"
	"image/color"
	"math"
)

// palette gives each model of a report one colour, the same in every run:
// models sorted by name take Tableau 10's colours in turn, and past ten,
// hues a golden angle apart.
type palette struct {
	names []string
	index map[string]int
}

var tableau10 = []color.RGBA{
	{0x4e, 0x79, 0xa7, 0xff}, {0xf2, 0x8e, 0x2b, 0xff}, {0xe1, 0x57, 0x59, 0xff}, {0x76, 0xb7, 0xb2, 0xff},
	{0x59, 0xa1, 0x4f, 0xff}, {0xed, 0xc9, 0x48, 0xff}, {0xb0, 0x7a, 0xa1, 0xff}, {0xff, 0x9d, 0xa7, 0xff},
	{0x9c, 0x75, 0x5f, 0xff}, {0xba, 0xb0, 0xac, 0xff},
}

// newPalette is the palette of names, sorted and without duplicates.
func newPalette(names []string) *palette {
	p := &palette{names: names, index: make(map[string]int, len(names))}
	for i, n := range names {
		p.index[n] = i
	}
	return p
}

// of is model's colour; grey for a model the palette lacks.
func (p *palette) of(model string) color.RGBA {
	i, ok := p.index[model]
	switch {
	case !ok:
		return neutral
	case i < len(tableau10):
		return tableau10[i]
	default:
		return hsl(math.Mod(float64(i-len(tableau10))*137.508+20, 360), 0.55, 0.5)
	}
}

// state is base as a residency in state is drawn: as it is when ready,
// lighter while starting, lighter still while stopping.
func (p *palette) state(base color.Color, state string) color.RGBA {
	switch state {
	case "starting":
		return mix(base, 0.5)
	case "stopping":
		return mix(base, 0.7)
	default:
		r, g, b, _ := base.RGBA()
		return color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 0xff}
	}
}

// mix is c blended with white, w of white.
func mix(c color.Color, w float64) color.RGBA {
	r, g, b, _ := c.RGBA()
	f := func(v uint32) uint8 { return uint8(math.Round(float64(v>>8)*(1-w) + 255*w)) }
	return color.RGBA{f(r), f(g), f(b), 0xff}
}

// textOn is black or white, whichever reads better on c.
func textOn(c color.Color) color.Color {
	r, g, b, _ := c.RGBA()
	if 0.299*float64(r>>8)+0.587*float64(g>>8)+0.114*float64(b>>8) > 150 {
		return color.Black
	}
	return color.White
}

// hex is c as CSS writes it.
func hex(c color.Color) string {
	r, g, b, _ := c.RGBA()
	return fmt.Sprintf("#%02x%02x%02x", r>>8, g>>8, b>>8)
}

// hsl converts hue (degrees), saturation and lightness to RGB.
func hsl(h, s, l float64) color.RGBA {
	c := (1 - math.Abs(2*l-1)) * s
	x := c * (1 - math.Abs(math.Mod(h/60, 2)-1))
	var r, g, b float64
	switch {
	case h < 60:
		r, g = c, x
	case h < 120:
		r, g = x, c
	case h < 180:
		g, b = c, x
	case h < 240:
		g, b = x, c
	case h < 300:
		r, b = x, c
	default:
		r, b = c, x
	}
	m := l - c/2
	f := func(v float64) uint8 { return uint8(math.Round((v + m) * 255)) }
	return color.RGBA{f(r), f(g), f(b), 0xff}
}
