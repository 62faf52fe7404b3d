package gguf

import (
	"fmt"
	"math"
)

// ValueType is the type tag of a metadata value (gguf_type).
type ValueType uint32

// The metadata value types of GGUF v2 and v3.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool",
	"string", "array", "uint64", "int64", "float64"}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("gguf_type(%d)", uint32(t))
}

// fixedSize is the encoded size of a scalar of type t; 0 for strings, arrays and unknown types.
func (t ValueType) fixedSize() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// minSize is the fewest bytes one encoded value of type t occupies, used to bound element counts
// by the bytes left in the file before anything is allocated.
func (t ValueType) minSize() int {
	switch t {
	case TypeString:
		return 8 // the length
	case TypeArray:
		return 12 // element type and count
	}
	return t.fixedSize()
}

// Value is one metadata value. Scalars hold uint64 (unsigned types), int64 (signed types),
// float64 (float types), bool or string; arrays hold a slice of the element type's Go type
// ([]uint8, []int8, []uint16, []int16, []uint32, []int32, []float32, []bool, []string, []uint64,
// []int64, []float64, or []Value for arrays of arrays).
type Value struct {
	// Type is the value's type tag.
	Type ValueType
	// Elem is the element type of an array (unused otherwise).
	Elem ValueType
	// v is the decoded value, as described above.
	v any
}

// Any returns the decoded Go value (see Value).
func (v Value) Any() any { return v.v }

// Str returns a string value.
func (v Value) Str() (string, bool) {
	s, ok := v.v.(string)
	return s, ok && v.Type == TypeString
}

// Uint returns an integer value that is non-negative, whatever its integer type.
func (v Value) Uint() (uint64, bool) {
	switch x := v.v.(type) {
	case uint64:
		return x, true
	case int64:
		if x >= 0 {
			return uint64(x), true
		}
	}
	return 0, false
}

// Int returns an integer value that fits in an int64, whatever its integer type.
func (v Value) Int() (int64, bool) {
	switch x := v.v.(type) {
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x), true
		}
	case int64:
		return x, true
	}
	return 0, false
}

// Float returns a float value (float32 or float64), or an integer one converted.
func (v Value) Float() (float64, bool) {
	switch x := v.v.(type) {
	case float64:
		return x, true
	case uint64:
		return float64(x), true
	case int64:
		return float64(x), true
	}
	return 0, false
}

// Bool returns a bool value.
func (v Value) Bool() (bool, bool) {
	b, ok := v.v.(bool)
	return b, ok
}

// Len is the number of elements of an array (0 for scalars).
func (v Value) Len() int {
	switch x := v.v.(type) {
	case []uint8:
		return len(x)
	case []int8:
		return len(x)
	case []uint16:
		return len(x)
	case []int16:
		return len(x)
	case []uint32:
		return len(x)
	case []int32:
		return len(x)
	case []float32:
		return len(x)
	case []bool:
		return len(x)
	case []string:
		return len(x)
	case []uint64:
		return len(x)
	case []int64:
		return len(x)
	case []float64:
		return len(x)
	case []Value:
		return len(x)
	}
	return 0
}

// Strings returns an array of strings.
func (v Value) Strings() ([]string, bool) {
	s, ok := v.v.([]string)
	return s, ok
}

// Ints returns an array of any integer type as int64s (false if a uint64 element overflows).
func (v Value) Ints() ([]int64, bool) {
	conv := func(n int, at func(int) int64) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = at(i)
		}
		return out
	}
	switch x := v.v.(type) {
	case []uint8:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []int8:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []uint16:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []int16:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []uint32:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []int32:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []int64:
		return x, true
	case []uint64:
		for _, e := range x {
			if e > math.MaxInt64 {
				return nil, false
			}
		}
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	}
	return nil, false
}

// Float32s returns an array of float32s (or float64s, narrowed).
func (v Value) Float32s() ([]float32, bool) {
	switch x := v.v.(type) {
	case []float32:
		return x, true
	case []float64:
		out := make([]float32, len(x))
		for i, e := range x {
			out[i] = float32(e)
		}
		return out, true
	}
	return nil, false
}

// describe is the value's type for error messages: "uint32", "array[string]".
func (v Value) describe() string {
	if v.Type == TypeArray {
		return "array[" + v.Elem.String() + "]"
	}
	return v.Type.String()
}

// valueOf wraps a Go value for the writer. Supported: the scalar Go types of every GGUF type
// (uint8 ... float64, bool, string, and int, written as int64), slices of them, and Value.
func valueOf(x any) (Value, error) {
	switch x := x.(type) {
	case Value:
		return x, nil
	case uint8:
		return Value{Type: TypeUint8, v: uint64(x)}, nil
	case int8:
		return Value{Type: TypeInt8, v: int64(x)}, nil
	case uint16:
		return Value{Type: TypeUint16, v: uint64(x)}, nil
	case int16:
		return Value{Type: TypeInt16, v: int64(x)}, nil
	case uint32:
		return Value{Type: TypeUint32, v: uint64(x)}, nil
	case int32:
		return Value{Type: TypeInt32, v: int64(x)}, nil
	case uint64:
		return Value{Type: TypeUint64, v: x}, nil
	case int64:
		return Value{Type: TypeInt64, v: x}, nil
	case int:
		return Value{Type: TypeInt64, v: int64(x)}, nil
	case float32:
		return Value{Type: TypeFloat32, v: float64(x)}, nil
	case float64:
		return Value{Type: TypeFloat64, v: x}, nil
	case bool:
		return Value{Type: TypeBool, v: x}, nil
	case string:
		return Value{Type: TypeString, v: x}, nil
	case []uint8:
		return Value{Type: TypeArray, Elem: TypeUint8, v: x}, nil
	case []int8:
		return Value{Type: TypeArray, Elem: TypeInt8, v: x}, nil
	case []uint16:
		return Value{Type: TypeArray, Elem: TypeUint16, v: x}, nil
	case []int16:
		return Value{Type: TypeArray, Elem: TypeInt16, v: x}, nil
	case []uint32:
		return Value{Type: TypeArray, Elem: TypeUint32, v: x}, nil
	case []int32:
		return Value{Type: TypeArray, Elem: TypeInt32, v: x}, nil
	case []uint64:
		return Value{Type: TypeArray, Elem: TypeUint64, v: x}, nil
	case []int64:
		return Value{Type: TypeArray, Elem: TypeInt64, v: x}, nil
	case []float32:
		return Value{Type: TypeArray, Elem: TypeFloat32, v: x}, nil
	case []float64:
		return Value{Type: TypeArray, Elem: TypeFloat64, v: x}, nil
	case []bool:
		return Value{Type: TypeArray, Elem: TypeBool, v: x}, nil
	case []string:
		return Value{Type: TypeArray, Elem: TypeString, v: x}, nil
	}
	return Value{}, fmt.Errorf("gguf: cannot encode a %T as a metadata value", x)
}

// ArrayOf makes an array value whose elements are arrays (GGUF allows nesting).
func ArrayOf(elems ...Value) Value {
	return Value{Type: TypeArray, Elem: TypeArray, v: elems}
}
