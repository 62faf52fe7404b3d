package chat

import (
	"encoding/json"
	"testing"
	"time"
)

func TestGoValueNormalization(t *testing.T) {
	tmpl, err := Compile(`{{ n }} {{ f }} {{ xs }} {{ ints }} {{ num }} {{ numf }} {{ m|tojson }} {{ raw|tojson }} {{ strs }}`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(map[string]any{
		"n":    float64(2), // encoding/json's form of the JSON integer 2
		"f":    2.5,
		"xs":   []string{"a"},
		"ints": []int{1, 2},
		"num":  json.Number("7"),
		"numf": json.Number("7.0"),
		"m":    map[string]any{"b": 1, "a": []any{true, nil}},
		"raw":  json.RawMessage(`{"z": 1, "a": 1.0}`),
		"strs": map[string]string{"k": "v"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `2 2.5 ['a'] [1, 2] 7 7.0 {"a": [true, null], "b": 1} {"z": 1, "a": 1.0} {'k': 'v'}`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if _, err := tmpl.Render(map[string]any{"n": struct{}{}}); err == nil {
		t.Error("a struct variable rendered without error")
	}
}

func TestStrftimeNow(t *testing.T) {
	tmpl, err := Compile(`{{ strftime_now("%d %b %Y %H:%M") }}`)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2024, time.July, 5, 9, 3, 0, 0, time.UTC)
	got, err := tmpl.Apply(nil, Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if got != "05 Jul 2024 09:03" {
		t.Errorf("got %q", got)
	}
}

func TestResourceLimits(t *testing.T) {
	saved := maxSteps
	maxSteps = 10000
	defer func() { maxSteps = saved }()
	for _, src := range []string{
		`{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}`,
		`{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}`,
		`{{ 'x' * 100000000 }}`,
	} {
		tmpl, err := Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tmpl.Render(nil); err == nil {
			t.Errorf("%s: rendered without hitting a limit", src)
		}
	}
}
