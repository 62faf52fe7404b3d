package gguf

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/llmserve/llmserve/quant"
)

// sample builds a file with one value of every metadata type, nested arrays, and tensors of
// several types, in the order the tests expect.
func sample(t testing.TB, alignment uint32) ([]byte, *Writer) {
	t.Helper()
	w := NewWriter()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.Set("general.architecture", "llama"))
	if alignment != 0 {
		must(w.Set("general.alignment", alignment))
	}
	must(w.Set("u8", uint8(200)))
	must(w.Set("i8", int8(-100)))
	must(w.Set("u16", uint16(60000)))
	must(w.Set("i16", int16(-30000)))
	must(w.Set("u32", uint32(4000000000)))
	must(w.Set("i32", int32(-2000000000)))
	must(w.Set("f32", float32(1.5e-6)))
	must(w.Set("b", true))
	must(w.Set("s", "héllo"))
	must(w.Set("u64", uint64(math.MaxUint64)))
	must(w.Set("i64", int64(math.MinInt64)))
	must(w.Set("f64", math.Pi))
	must(w.Set("a.u8", []uint8{1, 2, 3}))
	must(w.Set("a.i8", []int8{-1, 2}))
	must(w.Set("a.u16", []uint16{1, 65535}))
	must(w.Set("a.i16", []int16{-1, 32767}))
	must(w.Set("a.u32", []uint32{7}))
	must(w.Set("a.i32", []int32{-7, 1, 3}))
	must(w.Set("a.f32", []float32{0.25, -1}))
	must(w.Set("a.b", []bool{true, false}))
	must(w.Set("a.s", []string{"a b", "", "Ġx"}))
	must(w.Set("a.u64", []uint64{1 << 40}))
	must(w.Set("a.i64", []int64{-1 << 40}))
	must(w.Set("a.f64", []float64{1e300}))
	inner, _ := valueOf([]int32{1, 2})
	empty, _ := valueOf([]string{})
	must(w.Set("a.a", ArrayOf(inner, empty)))
	f32 := make([]byte, 4*6)
	for i := range 6 {
		binary.LittleEndian.PutUint32(f32[4*i:], math.Float32bits(float32(i)))
	}
	must(w.AddTensor("w.f32", quant.F32, []uint64{3, 2}, f32))
	must(w.AddTensor("w.bf16", quant.BF16, []uint64{5}, bytes.Repeat([]byte{0x80, 0x3f}, 5)))
	q8 := bytes.Repeat([]byte{7}, 2*34)
	must(w.AddTensorFunc("w.q8", quant.Q8_0, []uint64{32, 2}, func(out io.Writer) error {
		_, err := out.Write(q8)
		return err
	}))
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), w
}

func TestRoundTrip(t *testing.T) {
	for _, align := range []uint32{0, 64} {
		data, w := sample(t, align)
		f, err := Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		if f.Version != 3 || len(f.KV) != len(w.kv) || len(f.Tensors) != 3 {
			t.Fatalf("version %d, %d keys, %d tensors", f.Version, len(f.KV), len(f.Tensors))
		}
		for i, kv := range w.kv {
			got := f.KV[i]
			if got.Key != kv.Key || got.Value.Type != kv.Value.Type || got.Value.Elem != kv.Value.Elem ||
				!reflect.DeepEqual(got.Value.v, kv.Value.v) {
				t.Errorf("key %d: got %s=%#v, want %s=%#v", i, got.Key, got.Value, kv.Key, kv.Value)
			}
		}
		wantAlign := DefaultAlignment
		if align != 0 {
			wantAlign = int(align)
		}
		if f.Alignment != wantAlign || f.DataOffset%int64(wantAlign) != 0 {
			t.Errorf("alignment %d, data at %d", f.Alignment, f.DataOffset)
		}
		ti, ok := f.Tensor("w.f32")
		if !ok || !reflect.DeepEqual(ti.Shape(), []int{2, 3}) || ti.Elements() != 6 || ti.Size != 24 {
			t.Fatalf("w.f32: %+v", ti)
		}
		d, err := f.TensorData(ti)
		if err != nil || math.Float32frombits(binary.LittleEndian.Uint32(d[20:])) != 5 {
			t.Errorf("w.f32 data %v, %v", d, err)
		}
		q, _ := f.Tensor("w.q8")
		if d, _ := f.TensorData(q); q.Size != 68 || q.Offset%uint64(wantAlign) != 0 || !bytes.Equal(d, bytes.Repeat([]byte{7}, 68)) {
			t.Errorf("w.q8: %+v", q)
		}
		// Typed getters and their errors name the key.
		if s, err := f.String("s"); s != "héllo" || err != nil {
			t.Errorf("String(s) = %q, %v", s, err)
		}
		if n, err := f.Uint("u32"); n != 4000000000 || err != nil {
			t.Errorf("Uint(u32) = %d, %v", n, err)
		}
		if _, err := f.Uint("i32"); err == nil || !strings.Contains(err.Error(), `"i32"`) {
			t.Errorf("Uint(i32) error %v", err)
		}
		if x, err := f.Float("f32"); float32(x) != 1.5e-6 || err != nil {
			t.Errorf("Float(f32) = %v, %v", x, err)
		}
		if _, err := f.String("missing"); err == nil || !strings.Contains(err.Error(), "missing") {
			t.Errorf("String(missing) error %v", err)
		}
		if s, err := f.Strings("a.s"); err != nil || !reflect.DeepEqual(s, []string{"a b", "", "Ġx"}) {
			t.Errorf("Strings(a.s) = %q, %v", s, err)
		}
		if v, _ := f.Get("a.u16"); v.Len() != 2 {
			t.Errorf("a.u16 len %d", v.Len())
		}
		if v, _ := f.Get("a.i32"); func() bool { x, ok := v.Ints(); return !ok || !reflect.DeepEqual(x, []int64{-7, 1, 3}) }() {
			t.Errorf("a.i32 ints")
		}
	}
}

func TestOpenAndIsGGUF(t *testing.T) {
	data, _ := sample(t, 0)
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if !IsGGUF(path) || IsGGUF(filepath.Dir(path)) || IsGGUF(path+".missing") {
		t.Error("IsGGUF")
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ti, _ := f.Tensor("w.bf16")
	d, err := f.TensorData(ti)
	if err != nil || len(d) != 10 || d[1] != 0x3f {
		t.Errorf("bf16 view %v %v", d, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(filepath.Join(t.TempDir(), "none.gguf")); err == nil {
		t.Error("Open of a missing file succeeded")
	}
}

// header writes a GGUF prefix by hand: version, tensor count, kv count.
func header(version uint32, tensors, kvs uint64) []byte {
	b := []byte(Magic)
	b = binary.LittleEndian.AppendUint32(b, version)
	b = binary.LittleEndian.AppendUint64(b, tensors)
	return binary.LittleEndian.AppendUint64(b, kvs)
}

func appendStr(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

func TestHostileInput(t *testing.T) {
	tensor := func(b []byte, name string, dims []uint64, typ uint32, off uint64) []byte {
		b = appendStr(b, name)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(dims)))
		for _, d := range dims {
			b = binary.LittleEndian.AppendUint64(b, d)
		}
		b = binary.LittleEndian.AppendUint32(b, typ)
		return binary.LittleEndian.AppendUint64(b, off)
	}
	pad := func(b []byte, n int) []byte { return append(b, make([]byte, n)...) }
	align := func(b []byte) []byte {
		for len(b)%32 != 0 {
			b = append(b, 0)
		}
		return b
	}
	kv := func(key string, typ uint32, rest ...byte) []byte {
		b := appendStr(header(3, 0, 1), key)
		b = binary.LittleEndian.AppendUint32(b, typ)
		return append(b, rest...)
	}
	arr := func(elem uint32, n uint64, rest ...byte) []byte {
		b := binary.LittleEndian.AppendUint32(nil, elem)
		b = binary.LittleEndian.AppendUint64(b, n)
		return append(b, rest...)
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "no header"},
		{"magic", []byte("GGUG\x03\x00\x00\x00"), "bad magic"},
		{"v1", header(1, 0, 0), "version 1"},
		{"v9", header(9, 0, 0), "unsupported version 9"},
		{"big-endian", binary.BigEndian.AppendUint32([]byte(Magic), 3), "big-endian"},
		{"kv count", header(3, 0, 1<<62), "metadata count"},
		{"tensor count", header(3, 1<<60, 0), "tensor count"},
		{"key length", pad(binary.LittleEndian.AppendUint64(header(3, 0, 1), 1<<62), 16), "string of"},
		{"value type", kv("k", 99, 0, 0, 0, 0), "unknown value type"},
		{"string length", kv("k", uint32(TypeString), binary.LittleEndian.AppendUint64(nil, 1<<40)...), "string of"},
		{"array count", kv("k", uint32(TypeArray), arr(uint32(TypeUint32), 1<<61)...), "count"},
		{"string array count", kv("k", uint32(TypeArray), arr(uint32(TypeString), 1<<40)...), "count"},
		{"array type", kv("k", uint32(TypeArray), arr(77, 1)...), "unknown type"},
		{"bool", kv("k", uint32(TypeBool), 2), "bool byte"},
		{"truncated value", kv("k", uint32(TypeUint64), 1, 2), "unexpected end"},
		{"alignment", kv("general.alignment", uint32(TypeUint32), 3, 0, 0, 0), "power of two"},
		{"alignment type", appendStr(kv("general.alignment", uint32(TypeString)), "32"), "power of two"},
		{"dims", pad(tensor(header(3, 1, 0), "t", []uint64{1, 1, 1, 1, 1}, 0, 0), 64), "dimensions"},
		{"dims overflow", pad(tensor(header(3, 1, 0), "t", []uint64{1 << 40, 1 << 40}, 0, 0), 64), "overflow"},
		{"past end", align(tensor(header(3, 1, 0), "t", []uint64{1000}, 0, 0)), "past the"},
		{"misaligned", pad(align(tensor(header(3, 1, 0), "t", []uint64{1}, 0, 4)), 64), "alignment"},
		{"block", pad(align(tensor(header(3, 1, 0), "t", []uint64{33}, uint32(quant.Q8_0), 0)), 64), "multiple of 32"},
		{"overlap", pad(align(tensor(tensor(header(3, 2, 0), "a", []uint64{16}, 0, 0), "b", []uint64{1}, 0, 32)), 128), "overlap"},
		{"duplicate tensor", pad(align(tensor(tensor(header(3, 2, 0), "a", []uint64{1}, 0, 0), "a", []uint64{1}, 0, 32)), 64), "twice"},
		{"duplicate key", nil, ""},
	} {
		if tc.name == "duplicate key" {
			// Two keys need a kv count of 2.
			b := header(3, 0, 2)
			for range 2 {
				b = appendStr(b, "k")
				b = binary.LittleEndian.AppendUint32(b, uint32(TypeUint8))
				b = append(b, 1)
			}
			tc.data, tc.want = b, "twice"
		}
		_, err := Parse(tc.data)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	// Every truncation of a valid file is an error, never a panic.
	data, _ := sample(t, 0)
	for n := 0; n < len(data); n++ {
		if f, err := Parse(data[:n]); err == nil {
			// Only the data section's trailing padding may go without losing a tensor.
			for _, ti := range f.Tensors {
				if _, err := f.TensorData(ti); err != nil {
					t.Fatalf("truncated to %d: %v", n, err)
				}
			}
		}
	}
}

func TestUnknownTensorType(t *testing.T) {
	b := appendStr(header(3, 1, 0), "t")
	b = binary.LittleEndian.AppendUint32(b, 1)
	b = binary.LittleEndian.AppendUint64(b, 256)
	b = binary.LittleEndian.AppendUint32(b, 13) // q5_k
	b = binary.LittleEndian.AppendUint64(b, 0)
	for len(b)%32 != 0 {
		b = append(b, 0)
	}
	b = append(b, make([]byte, 176)...)
	f, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.TensorData(f.Tensors[0]); err == nil || !strings.Contains(err.Error(), "q5_k") {
		t.Errorf("q5_k tensor data error %v", err)
	}
}

func TestWriterErrors(t *testing.T) {
	w := NewWriter()
	if err := w.Set("k", struct{}{}); err == nil {
		t.Error("Set of a struct succeeded")
	}
	if err := w.Set("general.alignment", uint32(48)); err == nil {
		t.Error("alignment 48 accepted")
	}
	if err := w.AddTensor("t", quant.Q4_K, []uint64{100}, nil); err == nil {
		t.Error("q4_k row of 100 accepted")
	}
	if err := w.AddTensor("t", quant.F32, []uint64{2}, make([]byte, 7)); err == nil {
		t.Error("wrong byte count accepted")
	}
	if err := w.AddTensor("t", quant.F32, []uint64{2}, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	if err := w.AddTensor("t", quant.F32, []uint64{2}, make([]byte, 8)); err == nil {
		t.Error("duplicate tensor accepted")
	}
	if err := w.AddTensorFunc("short", quant.F32, []uint64{2}, func(o io.Writer) error {
		_, err := o.Write(make([]byte, 4))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteTo(&bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "short") {
		t.Errorf("short fill: %v", err)
	}
}

// FuzzRead parses arbitrary bytes. Whatever Parse accepts must have every tensor inside the file,
// and writing its metadata back out and parsing that must give the same metadata.
func FuzzRead(f *testing.F) {
	data, _ := sample(f, 0)
	f.Add(data)
	data64, _ := sample(f, 64)
	f.Add(data64)
	f.Add(data[:len(data)/2])
	f.Add(header(3, 0, 0))
	f.Add(header(2, 0, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := Parse(b)
		if err != nil {
			return
		}
		for _, ti := range g.Tensors {
			d, err := g.TensorData(ti)
			if err == nil && int64(len(d)) != ti.Size {
				t.Fatalf("tensor %q: %d bytes, size %d", ti.Name, len(d), ti.Size)
			}
		}
		w := NewWriter()
		for _, kv := range g.KV {
			if err := w.Set(kv.Key, kv.Value); err != nil {
				return // a general.alignment the writer refuses cannot have parsed
			}
		}
		var buf bytes.Buffer
		if _, err := w.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		h, err := Parse(buf.Bytes())
		if err != nil {
			t.Fatalf("rewritten metadata does not parse: %v", err)
		}
		if len(h.KV) != len(g.KV) {
			t.Fatalf("%d keys rewritten as %d", len(g.KV), len(h.KV))
		}
		for i := range h.KV {
			a, b := g.KV[i], h.KV[i]
			if a.Key != b.Key || a.Value.Type != b.Value.Type || !sameValue(a.Value.v, b.Value.v) {
				t.Fatalf("key %q changed on rewrite", a.Key)
			}
		}
	})
}

// sameValue is DeepEqual that treats NaNs with equal bits as equal.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case float64:
		return math.Float64bits(x) == math.Float64bits(b.(float64))
	case []float32:
		y := b.([]float32)
		for i := range x {
			if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
				return false
			}
		}
		return len(x) == len(y)
	case []float64:
		y := b.([]float64)
		for i := range x {
			if math.Float64bits(x[i]) != math.Float64bits(y[i]) {
				return false
			}
		}
		return len(x) == len(y)
	case []Value:
		y := b.([]Value)
		if len(x) != len(y) {
			return false
		}
		for i := range x {
			if x[i].Type != y[i].Type || x[i].Elem != y[i].Elem || !sameValue(x[i].v, y[i].v) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

// TestCheckNotFile: a model path that is a file but not GGUF is named as such (bad magic), not
// taken for a directory; a GGUF file, a directory and a missing path pass (their loaders say).
func TestCheckNotFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "x.gguf")
	if err := os.WriteFile(bad, []byte("GGUG\x03\x00\x00\x00rest"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short.gguf")
	if err := os.WriteFile(short, []byte("GG"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.gguf")
	if err := os.WriteFile(good, []byte("GGUF\x03\x00\x00\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{bad, short} {
		err := CheckNotFile(p)
		if err == nil || !strings.Contains(err.Error(), "bad magic") || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v, want an error naming it and its bad magic", p, err)
		}
	}
	for _, p := range []string{good, dir, filepath.Join(dir, "missing")} {
		if err := CheckNotFile(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}
