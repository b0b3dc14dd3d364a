package sim

import (
	"container/heap"
	"math"
)

// flowGraph is a min-cost flow network for successive shortest paths
// with Johnson potentials (Ahuja, Magnanti & Orlin, "Network Flows",
// 1993, §9.7): integer capacities, real costs per unit, negative costs
// allowed on arcs that go forward in node order (the network is a DAG,
// so the first potentials come from one pass in that order). gonum has
// no flow solver (graph/flow holds dominators only); see
// docs/RATIONALE.md.
type flowGraph struct {
	n    int
	head []int // per node, its first arc, -1: none
	arcs []flowArc
}

type flowArc struct {
	to, next int
	cap      int64
	cost     float64
}

func newFlowGraph(n int) *flowGraph {
	g := &flowGraph{n: n, head: make([]int, n)}
	for i := range g.head {
		g.head[i] = -1
	}
	return g
}

// add adds the arc u→v (u < v) and its residual twin.
func (g *flowGraph) add(u, v int, cap int64, cost float64) {
	g.arcs = append(g.arcs, flowArc{to: v, next: g.head[u], cap: cap, cost: cost})
	g.head[u] = len(g.arcs) - 1
	g.arcs = append(g.arcs, flowArc{to: u, next: g.head[v], cap: 0, cost: -cost})
	g.head[v] = len(g.arcs) - 1
}

// minCostFlow sends up to want units from node 0 to node n−1 at least
// cost and returns the units sent and their cost. Every arc must go from
// a lower node to a higher one.
func (g *flowGraph) minCostFlow(want int64) (int64, float64) {
	pot := make([]float64, g.n)
	for i := range pot {
		pot[i] = math.Inf(1)
	}
	pot[0] = 0
	for u := range g.n { // topological order: arcs go up
		if math.IsInf(pot[u], 1) {
			continue
		}
		for a := g.head[u]; a >= 0; a = g.arcs[a].next {
			if e := g.arcs[a]; e.cap > 0 && pot[u]+e.cost < pot[e.to] {
				pot[e.to] = pot[u] + e.cost
			}
		}
	}
	dist := make([]float64, g.n)
	via := make([]int, g.n)
	var sent int64
	var cost float64
	for sent < want {
		for i := range dist {
			dist[i], via[i] = math.Inf(1), -1
		}
		dist[0] = 0
		pq := &distHeap{{0, 0}}
		for pq.Len() > 0 {
			it := heap.Pop(pq).(distItem)
			if it.d > dist[it.u] {
				continue
			}
			for a := g.head[it.u]; a >= 0; a = g.arcs[a].next {
				e := g.arcs[a]
				if e.cap <= 0 || math.IsInf(pot[e.to], 1) {
					continue
				}
				rc := max(e.cost+pot[it.u]-pot[e.to], 0) // ≥ 0 but for rounding
				if d := it.d + rc; d < dist[e.to] {
					dist[e.to], via[e.to] = d, a
					heap.Push(pq, distItem{d, e.to})
				}
			}
		}
		t := g.n - 1
		if math.IsInf(dist[t], 1) {
			break
		}
		for i := range pot { // nodes beyond t move as far as t (AtCoder Library's rule), keeping reduced costs ≥ 0
			if !math.IsInf(pot[i], 1) {
				pot[i] += min(dist[i], dist[t])
			}
		}
		push := want - sent
		for v := t; v != 0; v = g.arcs[via[v]^1].to {
			push = min(push, g.arcs[via[v]].cap)
		}
		for v := t; v != 0; v = g.arcs[via[v]^1].to {
			g.arcs[via[v]].cap -= push
			g.arcs[via[v]^1].cap += push
			cost += float64(push) * g.arcs[via[v]].cost
		}
		sent += push
	}
	return sent, cost
}

type distItem struct {
	d float64
	u int
}

type distHeap []distItem

func (h distHeap) Len() int           { return len(h) }
func (h distHeap) Less(i, j int) bool { return h[i].d < h[j].d }
func (h distHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *distHeap) Push(x any)        { *h = append(*h, x.(distItem)) }
func (h *distHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
