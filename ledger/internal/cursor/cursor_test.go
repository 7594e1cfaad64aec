package cursor

import "testing"

func TestRoundTrip(t *testing.T) {
	for _, i := range []uint64{0, 1, 999, 1 << 40} {
		got, ok := Decode(Encode(i))
		if !ok || got != i {
			t.Fatalf("Decode(Encode(%d)) = %d, %v", i, got, ok)
		}
	}
	if i, ok := Decode(""); !ok || i != ^uint64(0) {
		t.Fatalf("empty cursor = %d, %v", i, ok)
	}
	for _, bad := range []string{"12", "c1.", "c1.!!", "c1." + "LTE", "c2.MTI"} {
		if _, ok := Decode(bad); ok {
			t.Fatalf("Decode(%q) accepted", bad)
		}
	}
}
