package artifacts

import "container/heap"

// indexed is a binary heap of T, least first, whose elements know their
// place in it (pos), so that one can be removed or moved after its key
// changed in O(log n). Every comparison is counted in *cmps, the work the
// tests measure.
type indexed[T any] struct {
	xs   []T
	less func(a, b T) bool
	pos  func(T) *int
	cmps *int64
}

func (h *indexed[T]) Len() int { return len(h.xs) }

func (h *indexed[T]) Less(i, j int) bool {
	*h.cmps++
	return h.less(h.xs[i], h.xs[j])
}

func (h *indexed[T]) Swap(i, j int) {
	h.xs[i], h.xs[j] = h.xs[j], h.xs[i]
	*h.pos(h.xs[i]) = i
	*h.pos(h.xs[j]) = j
}

func (h *indexed[T]) Push(x any) {
	t := x.(T)
	*h.pos(t) = len(h.xs)
	h.xs = append(h.xs, t)
}

func (h *indexed[T]) Pop() any {
	n := len(h.xs) - 1
	t := h.xs[n]
	var zero T
	h.xs[n] = zero
	h.xs = h.xs[:n]
	*h.pos(t) = -1
	return t
}

// add puts t in the heap.
func (h *indexed[T]) add(t T) { heap.Push(h, t) }

// remove takes t, which is in the heap, out of it.
func (h *indexed[T]) remove(t T) { heap.Remove(h, *h.pos(t)) }

// fix restores the order after t's key changed.
func (h *indexed[T]) fix(t T) { heap.Fix(h, *h.pos(t)) }

// least is the least element; ok is false for an empty heap.
func (h *indexed[T]) least() (t T, ok bool) {
	if len(h.xs) == 0 {
		return t, false
	}
	return h.xs[0], true
}
