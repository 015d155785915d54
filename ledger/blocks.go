package ledger

// blocks collects rows in growing blocks and joins them once at the end:
// appending a million 200-byte rows to one slice copies them two to three
// times over as it doubles, and that copying dominated a large scan.
type blocks[T any] struct {
	done [][]T
	cur  []T
	n    int
}

const maxBlock = 16 << 10

func (b *blocks[T]) add(v T) {
	if len(b.cur) == cap(b.cur) {
		size := 64
		if b.cur != nil {
			b.done = append(b.done, b.cur)
			size = min(2*cap(b.cur), maxBlock)
		}
		b.cur = make([]T, 0, size)
	}
	b.cur = append(b.cur, v)
	b.n++
}

// slice returns all rows in order, in one slice of exactly their number.
func (b *blocks[T]) slice() []T {
	if len(b.done) == 0 {
		return b.cur
	}
	out := make([]T, 0, b.n)
	for _, d := range b.done {
		out = append(out, d...)
	}
	return append(out, b.cur...)
}
