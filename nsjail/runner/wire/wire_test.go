package wire

import "testing"

func TestJSONDepth(t *testing.T) {
	for raw, want := range map[string]int{
		`1`:                          0,
		`"[[["`:                      0,
		`[]`:                         1,
		`{"a": [1, {"b": "]]]"}]}`:   3,
		`["\"[", ["\\", [[]]]]`:      4,
		`{"k\\\"{": {"x": "\\\\["}}`: 2,
	} {
		if got := JSONDepth([]byte(raw)); got != want {
			t.Errorf("JSONDepth(%s) = %d, want %d", raw, got, want)
		}
	}
}
