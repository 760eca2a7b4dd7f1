package toolschema

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestMeasureRefusesCostlyNumbers(t *testing.T) {
	for _, n := range []string{"1e999999", "-1E+401", "1e-401", "0e99999", "1e309", "-1.8e308", "1" + strings.Repeat("0", 1000), "0." + strings.Repeat("1", 1000), "1e00000000000000000000000000000000999"} {
		if _, err := Measure([]byte(`{"a": [1, {"b": ` + n + `}]}`)); err == nil || !strings.Contains(err.Error(), "is beyond what the daemon checks") {
			t.Errorf("%.50s: %v", n, err)
		}
	}
	for _, n := range []string{"0", "-0.5", "1e308", "1.7976931348623157e308", "1e-400", "4.9e-324", "1e-0000000000000000000400", "123456789012345678901234567890", "0." + strings.Repeat("1", 998)} {
		if _, err := Measure([]byte(`{"a": "1e999999", "` + n + `": ` + n + `}`)); err != nil {
			t.Errorf("%.50s: %v", n, err)
		}
	}
}

func TestMeasureTakesAnyBytes(t *testing.T) {
	for _, b := range []string{"}}}]]", `"a": 1}}`, "[[[[", `"\`, "-", strings.Repeat("[", 100) + "1"} {
		_, _ = Measure([]byte(b)) // no panic
	}
}

func TestMeasureCountsByDepth(t *testing.T) {
	sh, err := Measure([]byte(` { "a" : [ 1 , "xy\"z" , { "long_name_of_property" : null } ] , "b" : true } `))
	if err != nil {
		t.Fatal(err)
	}
	// Depth 0: the object and its 2 properties; 1: the array, its 3
	// items and true; 2: 1, the string, the object and its property; 3:
	// null. Names count with the values they name.
	want := Shape{}
	want.count[0], want.count[1], want.count[2], want.count[3] = 3, 5, 4, 1
	want.bytes[1], want.bytes[2], want.bytes[3] = 3+3, 1+7, 23
	if sh != want {
		t.Errorf("got %v %v\nwant %v %v", sh.count[:4], sh.bytes[:4], want.count[:4], want.bytes[:4])
	}
}

// exponential is a schema of a few hundred bytes whose checks double at
// each level of the arguments.
const exponential = `{"$defs": {"a": {"anyOf": [{"items": {"$ref": "#/$defs/a"}}, {"items": {"$ref": "#/$defs/a"}, "minItems": 1}]}}, "properties": {"x": {"$ref": "#/$defs/a"}}}`

// diamond is one whose checks double at each of 30 $refs, on any value.
func diamond() string {
	var b strings.Builder
	b.WriteString(`{"$ref": "#/$defs/d0", "$defs": {`)
	for i := range 30 {
		fmt.Fprintf(&b, `"d%d": {"allOf": [{"$ref": "#/$defs/d%d"}, {"$ref": "#/$defs/d%d"}]}, `, i, i+1, i+1)
	}
	b.WriteString(`"d30": {"type": "object"}}}`)
	return b.String()
}

func TestCostlySchemasAreRefused(t *testing.T) {
	for name, schema := range map[string]string{
		"exponential": exponential,
		"diamond":     diamond(),
		"loop":        `{"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "object"}]}}, "$ref": "#/$defs/a"}`,
		"big number":  `{"properties": {"n": {"minimum": 1e999999}}}`,
		"big enum":    `{"properties": {"n": {"enum": [` + strings.TrimSuffix(strings.Repeat("1,", MaxEvaluations+1), ",") + `]}}}`,
	} {
		_, err := Compile([]byte(schema))
		if !errors.Is(err, ErrRefused) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Recursion that goes down one level at a time is fine, however
	// deep, and so is a schema of many properties.
	tree := `{"$ref": "#/$defs/node", "$defs": {"node": {"type": "object", "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["name"]}}}`
	var props []string
	for i := range 2000 {
		props = append(props, fmt.Sprintf(`"p%d": {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 0}]}`, i))
	}
	many := `{"type": "object", "properties": {` + strings.Join(props, ", ") + `}, "additionalProperties": false}`
	for _, schema := range []string{tree, many} {
		if _, err := Compile([]byte(schema)); err != nil {
			t.Errorf("%.60s: %v", schema, err)
		}
	}
}

func TestCostCountsTheWorstValue(t *testing.T) {
	s, err := Compile([]byte(`{"properties": {"a": {"allOf": [{"items": {"type": "integer"}}, {"items": {"enum": [1, 2, 3]}}]}, "b": {"type": "string"}}, "additionalProperties": {"type": "number"}}`))
	if err != nil {
		t.Fatal(err)
	}
	// The object: 1 + its 2 properties; "a": its allOf of 3 (1 each);
	// an item of "a": 1 (type) + 1 + 3 (enum).
	if got := s.cost.evals[:3]; got[0] != 3 || got[1] != 3 || got[2] != 5 {
		t.Errorf("evals %v", got)
	}
}

func TestAdmit(t *testing.T) {
	// 100 subschemas for every item: 50,000 items are too much to check,
	// 1,000 are not.
	var subs []string
	for range 100 {
		subs = append(subs, `{"items": {"type": "number"}}`)
	}
	s, err := Compile([]byte(`{"properties": {"a": {"allOf": [` + strings.Join(subs, ",") + `]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	items := func(n int) []byte { return []byte(`{"a": [` + strings.TrimSuffix(strings.Repeat("1,", n), ",") + `]}`) }
	if err := Admit(s, items(50000)); err == nil || !strings.HasPrefix(err.Error(), "they are too much to check against the input schema: an estimated ") {
		t.Errorf("50,000: %v", err)
	}
	if err := Admit(s, items(1000)); err != nil {
		t.Errorf("1,000: %v", err)
	}
	if err := Admit(nil, []byte(`{"a": 1e999}`)); err == nil {
		t.Error("a number out of range passed without a schema")
	}
}

// TestCacheIsBoundedBySize: schemas over maxCachedSchema are not kept,
// and the others only up to cacheBytes together.
func TestCacheIsBoundedBySize(t *testing.T) {
	schema := func(i, size int) []byte {
		return []byte(fmt.Sprintf(`{"title": "%d", "description": "%s"}`, i, strings.Repeat("d", size)))
	}
	big := schema(0, maxCachedSchema)
	a, err := Compile(big)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := Compile(big); a == b {
		t.Error("a schema over maxCachedSchema was cached")
	}
	small := schema(1, 1000)
	a, _ = Compile(small)
	if b, _ := Compile(small); a != b {
		t.Error("a small schema was not cached")
	}
	for i := range 2 * cacheBytes / (maxCachedSchema / 2) {
		if _, err := Compile(schema(i+2, maxCachedSchema/2)); err != nil {
			t.Fatal(err)
		}
	}
	schemas.mu.Lock()
	n, bytes := len(schemas.byKey), schemas.bytes
	schemas.mu.Unlock()
	if bytes > cacheBytes || n != len(schemas.order) || n < cacheBytes/maxCachedSchema {
		t.Errorf("the cache holds %d schemas of %d bytes", n, bytes)
	}
	if b, _ := Compile(small); a == b {
		t.Error("the oldest schema was kept")
	}
}
