package mcpserver

import (
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
)

// TestOutputSchemasMatchTheGoTypes keeps each tool's hand-written output
// schema, with its descriptions for the model, in step with the Go type its
// structured content is encoded from: a property for every JSON field and
// none more, each of the field's JSON type (with null only where the
// encoding can produce it), recursively, and only fields that are always
// encoded listed as required.
func TestOutputSchemasMatchTheGoTypes(t *testing.T) {
	for _, tc := range []struct {
		tool   string
		schema json.RawMessage
		typ    reflect.Type
	}{
		{ToolRunPython, runPythonTool(nil, nil).RawOutputSchema, reflect.TypeFor[api.Result]()},
		{ToolCheckEnvironment, checkEnvironmentTool(nil).RawOutputSchema, reflect.TypeFor[api.Info]()},
		{ToolValidatePython, validatePythonTool(nil).RawOutputSchema, reflect.TypeFor[validation]()},
		{ToolResetSession, resetSessionTool().RawOutputSchema, reflect.TypeFor[resetReport]()},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			var schema map[string]any
			if err := json.Unmarshal(tc.schema, &schema); err != nil {
				t.Fatalf("decode the output schema: %v", err)
			}
			for _, p := range schemaDrift(tc.tool, schema, tc.typ, false) {
				t.Error(p)
			}
		})
	}
}

// TestSchemaDriftFindsDrift: the comparison reports a missing property, an
// extra one, a wrong type, a missing null and a required field that may be
// left out.
func TestSchemaDriftFindsDrift(t *testing.T) {
	type inner struct {
		N int `json:"n"`
	}
	type sample struct {
		A string   `json:"a"`
		B *inner   `json:"b"`
		C []inner  `json:"c,omitempty"`
		D float64  `json:"d,omitempty"`
		E []string `json:"e"`
		F *inner   `json:"f"`
	}
	schema := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"a": map[string]any{"type": "string"},
			"b": map[string]any{"type": []any{"object", "null"}, "properties": map[string]any{}},
			"c": map[string]any{"type": "array", "items": map[string]any{
				"type": "object", "properties": map[string]any{"n": map[string]any{"type": "number"}},
			}},
			"d": map[string]any{"type": "number"},
			"f": map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}},
			"x": map[string]any{"type": "string"},
		},
		"required": []any{"a", "d"},
	}
	got := schemaDrift("sample", schema, reflect.TypeFor[sample](), false)
	want := []string{
		`sample.b.n: missing from the schema`,
		`sample.c[].n: schema type [number], want [integer]`,
		`sample.d: required, but omitempty in the Go type`,
		`sample.e: missing from the schema`,
		`sample.f: schema type [object], want [object null]`,
		`sample.x: in the schema, not in the Go type`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("schemaDrift reported\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// schemaDrift lists where schema (decoded JSON) and the JSON encoding of
// typ disagree, sorted, each starting with its path. nullable says the
// encoding may be null.
func schemaDrift(path string, schema map[string]any, typ reflect.Type, nullable bool) []string {
	var out []string
	typ = deref(typ)
	if typ == reflect.TypeFor[json.RawMessage]() {
		// Any JSON value: the schema must not narrow it to one type.
		if got := schemaTypes(schema); len(got) != 0 {
			return []string{path + ": schema type " + fmtList(got) + ", want any JSON (no type)"}
		}
		return nil
	}
	want := []string{jsonType(typ)}
	if nullable {
		want = append(want, "null")
	}
	if got := schemaTypes(schema); !slices.Equal(got, want) {
		return []string{path + ": schema type " + fmtList(got) + ", want " + fmtList(want)}
	}
	switch typ.Kind() {
	case reflect.Struct:
		if typ == timeType {
			break // encoded as an RFC 3339 string
		}
		props, _ := schema["properties"].(map[string]any)
		fields := jsonFields(typ)
		for name, f := range fields {
			p, ok := props[name].(map[string]any)
			if !ok {
				out = append(out, path+"."+name+": missing from the schema")
				continue
			}
			// A pointer that is never omitted can encode as null. (So
			// can a nil slice or map; the handlers leave none nil.)
			isNullable := f.Type.Kind() == reflect.Pointer && !omitempty(f)
			out = append(out, schemaDrift(path+"."+name, p, f.Type, isNullable)...)
		}
		for name := range props {
			if _, ok := fields[name]; !ok {
				out = append(out, path+"."+name+": in the schema, not in the Go type")
			}
		}
		required, _ := schema["required"].([]any)
		for _, r := range required {
			name, _ := r.(string)
			if f, ok := fields[name]; ok && omitempty(f) {
				out = append(out, path+"."+name+": required, but omitempty in the Go type")
			}
		}
	case reflect.Slice, reflect.Array:
		items, ok := schema["items"].(map[string]any)
		if !ok {
			return []string{path + ": array without items"}
		}
		out = append(out, schemaDrift(path+"[]", items, typ.Elem(), false)...)
	case reflect.Map:
		if extra, ok := schema["additionalProperties"].(map[string]any); ok {
			out = append(out, schemaDrift(path+"{}", extra, typ.Elem(), false)...)
		}
	}
	sort.Strings(out)
	return out
}

// timeType encodes as a string, not as the struct it is.
var timeType = reflect.TypeOf(time.Time{})

// jsonType is the JSON Schema type of a Go type's encoding.
func jsonType(t reflect.Type) string {
	if t == timeType {
		return "string"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	}
	return "unsupported Go kind " + t.Kind().String()
}

// jsonFields are the fields encoding/json writes for a struct, by name,
// with embedded structs' fields promoted.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	fields := make(map[string]reflect.StructField)
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || len(f.Index) > 1 && !promoted(t, f) {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" && deref(f.Type).Kind() == reflect.Struct {
			continue // its fields are listed themselves
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f
	}
	return fields
}

// promoted says whether a nested field reaches the encoding: every struct
// on its way is embedded without a JSON name of its own.
func promoted(t reflect.Type, f reflect.StructField) bool {
	for _, i := range f.Index[:len(f.Index)-1] {
		outer := t.Field(i)
		name, _, _ := strings.Cut(outer.Tag.Get("json"), ",")
		if !outer.Anonymous || name != "" {
			return false
		}
		t = deref(outer.Type)
	}
	return true
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

func omitempty(f reflect.StructField) bool {
	_, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
	return slices.Contains(strings.Split(opts, ","), "omitempty")
}

// schemaTypes is a schema's "type", a string or a list, as a list.
func schemaTypes(schema map[string]any) []string {
	switch v := schema["type"].(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, e := range v {
			s, _ := e.(string)
			out = append(out, s)
		}
		return out
	}
	return nil
}

func fmtList(l []string) string { return "[" + strings.Join(l, " ") + "]" }
