package mcpserver

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/cellblock/cellblock/internal/api"
)

// The tools' input and output schemas are generated (jsonschema.For) from
// the Go types the calls' arguments are decoded into (runArgs,
// validateArgs, resetArgs) and the structured content is encoded from
// (api.Result, api.Info, validation, resetReport), so that a schema says
// exactly what the code reads and writes. What a type cannot say is added
// here: the descriptions, written for a language model and kept by hand by
// property path (schemadocs.go), the error classes (api.ErrorTypes), and
// the bounds of the arguments, some of them the daemon's (its maxima, its
// Pythons). TestSchemaDescriptions keeps descriptions and types together:
// every property has one, and every one names a property.

// docs maps a property's path to its description: "code", "error.type",
// "display[].data" (through an array's items), "env{}" (a map's values);
// "" is the schema itself.
type docs map[string]string

// typeSchemas are the schemas of types whose JSON jsonschema.For cannot
// read off the type.
var typeSchemas = map[reflect.Type]*jsonschema.Schema{
	// Any JSON value, as it came.
	reflect.TypeFor[json.RawMessage](): {},
}

// schemaOf is the JSON Schema of T's JSON encoding, described by d.
func schemaOf[T any](d docs) *jsonschema.Schema {
	s, err := jsonschema.For[T](&jsonschema.ForOptions{TypeSchemas: typeSchemas})
	if err != nil {
		// Only a type that has no JSON Schema gets here: a mistake in
		// this package, which every test that builds the tools shows.
		panic(fmt.Sprintf("mcpserver: the schema of %v: %v", reflect.TypeFor[T](), err))
	}
	walkSchema(s, "", func(path string, s *jsonschema.Schema) {
		if text, ok := d[path]; ok {
			s.Description = text
		}
		// A pointer or a slice encodes as null only when its field is
		// not omitempty, which is also when For lists it as required.
		for name, p := range s.Properties {
			if !slices.Contains(s.Required, name) {
				dropNull(p)
			}
		}
	})
	return s
}

// dropNull takes "null" out of s's types.
func dropNull(s *jsonschema.Schema) {
	if len(s.Types) == 0 {
		return
	}
	types := slices.DeleteFunc(slices.Clone(s.Types), func(t string) bool { return t == "null" })
	if len(types) == 1 {
		s.Type, s.Types = types[0], nil
	} else {
		s.Types = types
	}
}

// walkSchema calls f on s and every schema below it, with its path.
func walkSchema(s *jsonschema.Schema, path string, f func(path string, s *jsonschema.Schema)) {
	if s == nil {
		return
	}
	f(path, s)
	for name, p := range s.Properties {
		if path != "" {
			name = path + "." + name
		}
		walkSchema(p, name, f)
	}
	walkSchema(s.Items, path+"[]", f)
	walkSchema(s.AdditionalProperties, path+"{}", f)
}

// property is the schema at path (as in docs) below s; it panics when
// there is none, a mistake in this package that every test shows.
func property(s *jsonschema.Schema, path string) *jsonschema.Schema {
	var found *jsonschema.Schema
	walkSchema(s, "", func(p string, s *jsonschema.Schema) {
		if p == path {
			found = s
		}
	})
	if found == nil {
		panic("mcpserver: no property " + path + " in a tool's schema")
	}
	return found
}

// asInput makes a generated schema an input schema: the arguments take no
// nulls (a pointer or a slice of the type is only how "absent" is read),
// and required lists the arguments a call must give, which the type
// cannot say.
func asInput(s *jsonschema.Schema, required ...string) *jsonschema.Schema {
	walkSchema(s, "", func(_ string, s *jsonschema.Schema) {
		dropNull(s)
		if s.Type == "object" {
			s.Required = nil
		}
	})
	s.Required = required
	if s.Properties == nil {
		s.Properties = map[string]*jsonschema.Schema{}
	}
	return s
}

func mustJSON(v any) json.RawMessage {
	data, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("mcpserver: encode schema: %v", err))
	}
	return data
}

// Input schemas.

// runPythonInput is run_python's input schema on a server whose network
// bound is allow (none: no network_allow parameter).
func runPythonInput(info *api.Info, allow []api.NetPattern) *jsonschema.Schema {
	s := asInput(schemaOf[runArgs](runArgDocs(info, allow)), "code")
	property(s, "code").MinLength = jsonschema.Ptr(1)
	deps := property(s, "dependencies")
	deps.MaxItems = jsonschema.Ptr(api.MaxDeps)
	deps.Items.MinLength, deps.Items.MaxLength = jsonschema.Ptr(1), jsonschema.Ptr(512)
	timeout := property(s, "timeout_seconds")
	timeout.ExclusiveMinimum = jsonschema.Ptr(0.0)
	memory := property(s, "memory_mb")
	memory.Minimum = jsonschema.Ptr(16.0)
	if info != nil && info.Maxima.TimeoutMs > 0 {
		timeout.Maximum = jsonschema.Ptr(float64(info.Maxima.TimeoutMs) / 1000)
	}
	if info != nil && info.Maxima.MemoryBytes > 0 {
		memory.Maximum = jsonschema.Ptr(float64(info.Maxima.MemoryBytes >> 20))
	}
	property(s, "python").Pattern = versionPattern.String()
	env := property(s, "env")
	env.PropertyNames = &jsonschema.Schema{Pattern: identifierPattern}
	env.MaxProperties = jsonschema.Ptr(api.MaxEnv)
	inputs := property(s, "inputs")
	inputs.PropertyNames = &jsonschema.Schema{Pattern: identifierPattern}
	inputs.MaxProperties = jsonschema.Ptr(api.MaxInputs)
	session := property(s, "session")
	session.Pattern, session.MaxLength = sessionNamePattern.String(), jsonschema.Ptr(maxSessionName)
	files := property(s, "files")
	files.Items.Required = []string{"path", "content"}
	path := property(s, "files[].path")
	path.MinLength, path.MaxLength = jsonschema.Ptr(1), jsonschema.Ptr(api.MaxFilePathBytes)
	property(s, "files[].encoding").Enum = []any{api.EncodingUTF8, api.EncodingBase64}
	if len(allow) == 0 {
		delete(s.Properties, "network_allow")
		s.PropertyOrder = slices.DeleteFunc(s.PropertyOrder, func(n string) bool { return n == "network_allow" })
	} else {
		net := property(s, "network_allow")
		net.MaxItems = jsonschema.Ptr(api.MaxNetworkAllow)
		net.Items.MinLength, net.Items.MaxLength = jsonschema.Ptr(1), jsonschema.Ptr(300)
	}
	return s
}

// identifierPattern is what the names of env and inputs must match.
const identifierPattern = "^[A-Za-z_][A-Za-z0-9_]*$"

// checkArgs are check_environment's arguments: none.
type checkArgs struct{}

func checkEnvironmentInput() *jsonschema.Schema {
	return asInput(schemaOf[checkArgs](nil))
}

func validatePythonInput(info *api.Info) *jsonschema.Schema {
	s := asInput(schemaOf[validateArgs](validateArgDocs(info)), "code")
	property(s, "code").MinLength = jsonschema.Ptr(1)
	property(s, "python").Pattern = versionPattern.String()
	return s
}

func resetSessionInput() *jsonschema.Schema {
	s := asInput(schemaOf[resetArgs](resetArgDocs), "session")
	session := property(s, "session")
	session.Pattern, session.MaxLength = sessionNamePattern.String(), jsonschema.Ptr(maxSessionName)
	return s
}

// Output schemas: the structured content of each tool.

func resultOutput() *jsonschema.Schema {
	s := schemaOf[api.Result](resultDocs)
	property(s, "error.type").Enum = errorTypes()
	return s
}

func infoOutput() *jsonschema.Schema { return schemaOf[api.Info](infoDocs) }

func validationOutput() *jsonschema.Schema { return schemaOf[validation](validationDocs) }

func resetOutput() *jsonschema.Schema { return schemaOf[resetReport](resetDocs) }

// errorTypes are the API's error classes, for an enum.
func errorTypes() []any {
	out := make([]any, len(api.ErrorTypes))
	for i, t := range api.ErrorTypes {
		out[i] = string(t)
	}
	return out
}

// errorTypesText lists the API's error classes, for a description.
func errorTypesText() string {
	names := make([]string, len(api.ErrorTypes))
	for i, t := range api.ErrorTypes {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}
