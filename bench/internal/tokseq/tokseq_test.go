package tokseq

import "testing"

func TestParseAndAt(t *testing.T) {
	cases := []struct {
		spec string
		key  int64
		want []int32
	}{
		{"affine:5,3,10", 99, []int32{5, 8, 1, 4}},
		{"prompt:1,8192", 8190, []int32{8191, 0, 1, 2}},
		{"affine:-1,-1,7", 0, []int32{6, 5, 4, 3}},
	}
	for _, c := range cases {
		s, err := Parse(c.spec)
		if err != nil {
			t.Fatalf("Parse(%q): %v", c.spec, err)
		}
		if s.String() != c.spec {
			t.Errorf("String() = %q, want %q", s.String(), c.spec)
		}
		for i, w := range c.want {
			if got := s.At(c.key, i); got != w {
				t.Errorf("%s At(%d,%d) = %d, want %d", c.spec, c.key, i, got, w)
			}
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, spec := range []string{"", "affine", "affine:1,2", "prompt:1,2,3", "affine:1,2,0", "prompt:x,5", "linear:1,2,3", "prompt:1,4294967296"} {
		if _, err := Parse(spec); err == nil {
			t.Errorf("Parse(%q) accepted", spec)
		}
	}
}
