package mcpserver

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/cellblock/cellblock/internal/api"
)

// describedSchemas are every schema the tools have, with the descriptions
// they were made from, with and without the daemon's info and a network
// bound.
func describedSchemas() map[string]struct {
	schema *jsonschema.Schema
	docs   docs
} {
	info := testInfo()
	allow := parseNetworkAllow([]string{"api.example.org:443"})
	type pair = struct {
		schema *jsonschema.Schema
		docs   docs
	}
	return map[string]pair{
		"run_python input":            {runPythonInput(nil, nil), runArgDocs(nil, nil)},
		"run_python input, info, net": {runPythonInput(&info, allow), runArgDocs(&info, allow)},
		"validate_python input":       {validatePythonInput(nil), validateArgDocs(nil)},
		"validate_python input, info": {validatePythonInput(&info), validateArgDocs(&info)},
		"reset_session input":         {resetSessionInput(), resetArgDocs},
		"check_environment input":     {checkEnvironmentInput(), nil},
		"run_python output":           {resultOutput(), resultDocs},
		"check_environment output":    {infoOutput(), infoDocs},
		"validate_python output":      {validationOutput(), validationDocs},
		"reset_session output":        {resetOutput(), resetDocs},
	}
}

// TestSchemaDescriptions: the hand-kept descriptions and the generated
// schemas agree: every property of every schema has a description (a new
// field of a type the schema is made from needs one), and every
// description names a property (a field that went takes its description
// with it).
func TestSchemaDescriptions(t *testing.T) {
	for name, tc := range describedSchemas() {
		t.Run(name, func(t *testing.T) {
			paths := map[string]bool{}
			walkSchema(tc.schema, "", func(path string, s *jsonschema.Schema) {
				paths[path] = true
				isProperty := path != "" && !strings.HasSuffix(path, "[]") && !strings.HasSuffix(path, "{}")
				if isProperty && strings.TrimSpace(s.Description) == "" {
					t.Errorf("%s has no description", path)
				}
			})
			for path := range tc.docs {
				if !paths[path] {
					t.Errorf("the description of %q names no property", path)
				}
			}
		})
	}
}

// TestOutputSchemasDescribeTheEncoding: the JSON of each tool's structured
// content, with every field set and with none, passes the tool's output
// schema; and an error.type outside the API's classes does not.
func TestOutputSchemasDescribeTheEncoding(t *testing.T) {
	for _, tc := range []struct {
		tool   string
		schema *jsonschema.Schema
		typ    reflect.Type
	}{
		{ToolRunPython, resultOutput(), reflect.TypeFor[api.Result]()},
		{ToolCheckEnvironment, infoOutput(), reflect.TypeFor[api.Info]()},
		{ToolValidatePython, validationOutput(), reflect.TypeFor[validation]()},
		{ToolResetSession, resetOutput(), reflect.TypeFor[resetReport]()},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			// Through its JSON, as a client gets it.
			var schema jsonschema.Schema
			if err := json.Unmarshal(mustJSON(tc.schema), &schema); err != nil {
				t.Fatal(err)
			}
			resolved, err := schema.Resolve(nil)
			if err != nil {
				t.Fatalf("resolve: %v", err)
			}
			full := reflect.New(tc.typ)
			fill(full.Elem())
			if r, ok := full.Interface().(*api.Result); ok {
				r.Error.Type = api.ErrSessionLost // a class, not "x"
			}
			for what, v := range map[string]any{"every field set": full.Interface(), "no field set": reflect.New(tc.typ).Interface()} {
				var instance any
				if err := json.Unmarshal(mustJSON(v), &instance); err != nil {
					t.Fatal(err)
				}
				if err := resolved.Validate(instance); err != nil {
					t.Errorf("%s: %v\n%s", what, err, mustJSON(v))
				}
			}
		})
	}
	resolved, err := resultOutput().Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string]any{}
	_ = json.Unmarshal(mustJSON(api.Result{Error: &api.Error{Type: "no_such_class", Message: "x"}}), &bad)
	if resolved.Validate(bad) == nil {
		t.Error("an error.type outside api.ErrorTypes passed the schema")
	}
}

// fill sets every field of v, recursively: a string "x", a number 1, true,
// one element in each slice and map, any JSON as an object.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			v.SetBytes([]byte(`{"a": [1, "b"]}`))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		e := reflect.New(v.Type().Elem()).Elem()
		fill(e)
		v.SetMapIndex(reflect.ValueOf("k").Convert(v.Type().Key()), e)
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	}
}
