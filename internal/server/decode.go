package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/cellblock/cellblock/internal/api"
)

// jsonFields are the JSON names a struct type accepts.
func jsonFields(t reflect.Type) map[string]bool {
	fields := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			fields[name] = true
		}
	}
	return fields
}

// decodeRunRequest reads and decodes a run request of at most limit
// bytes.
func decodeRunRequest(w http.ResponseWriter, r *http.Request, limit int64) (*api.RunRequest, *api.Error) {
	var req api.RunRequest
	if err := decodeStrictN(w, r, &req, limit); err != nil {
		return nil, err
	}
	return &req, nil
}

// DecodeRunRequest decodes a run request body. It is exported for the
// fuzz target and never panics.
func DecodeRunRequest(body []byte) (*api.RunRequest, *api.Error) {
	if len(body) > api.MaxRequestBytes {
		return nil, api.Errorf(api.ErrTooLarge, "", "request body is larger than %d bytes", api.MaxRequestBytes)
	}
	var req api.RunRequest
	if err := decodeBody(body, &req); err != nil {
		return nil, err
	}
	return &req, nil
}

// decodeStrict reads one JSON object of at most api.MaxRequestBytes into
// v, refusing unknown fields.
func decodeStrict(w http.ResponseWriter, r *http.Request, v any) *api.Error {
	return decodeStrictN(w, r, v, api.MaxRequestBytes)
}

// decodeStrictN is decodeStrict for a body of at most limit bytes (a
// request that may carry files).
func decodeStrictN(w http.ResponseWriter, r *http.Request, v any, limit int64) *api.Error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return api.Errorf(api.ErrBadRequest, "", "Content-Type must be application/json, not %q", ct)
	}
	if r.ContentLength > limit {
		return api.Errorf(api.ErrTooLarge, "", "request body is larger than %d bytes", limit)
	}
	rd := http.MaxBytesReader(w, r.Body, limit)
	var body []byte
	var err error
	if r.ContentLength >= 0 {
		// One buffer of the body's size: what a request holds is its
		// Content-Length, which boundBody counted, no more.
		body = make([]byte, r.ContentLength)
		_, err = io.ReadFull(rd, body)
	} else {
		body, err = io.ReadAll(rd)
	}
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return api.Errorf(api.ErrTooLarge, "", "request body is larger than %d bytes", limit)
		case errors.Is(err, os.ErrDeadlineExceeded):
			return bodyTooSlow()
		}
		return api.Errorf(api.ErrBadRequest, "", "read request body: %v", err)
	}
	return decodeBody(body, v)
}

// decodeBody decodes one JSON object into v, refusing unknown fields and
// wrong types with an error naming the field.
func decodeBody(body []byte, v any) *api.Error {
	if len(bytes.TrimSpace(body)) == 0 {
		return api.Errorf(api.ErrBadRequest, "", "request body is empty; send a JSON object such as {\"code\": \"print(1)\"}")
	}
	known := jsonFields(reflect.TypeOf(v).Elem())
	if decodeFast(body, v, known) {
		return nil
	}
	// What the fast path may have set goes.
	reflect.ValueOf(v).Elem().SetZero()
	return decodeSlow(body, v, known)
}

// decodeSlow is decodeBody in two passes, the first to name an unknown
// field.
func decodeSlow(body []byte, v any, known map[string]bool) *api.Error {
	// First pass: the object's keys, to name an unknown field.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return jsonError(err)
	}
	if raw == nil {
		return api.Errorf(api.ErrBadRequest, "", "request body must be a JSON object")
	}
	var unknown []string
	for k := range raw {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return api.Errorf(api.ErrBadRequest, unknown[0], "unknown field")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if dec.More() {
		return api.Errorf(api.ErrBadRequest, "", "request body holds more than one JSON value")
	}
	return nil
}

func jsonError(err error) *api.Error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return api.Errorf(api.ErrBadRequest, "", "request body must be a JSON object, not %s", te.Value)
		}
		return api.Errorf(api.ErrBadRequest, field, "must be %s, not %s", typeName(te.Type), te.Value)
	case errors.As(err, &se):
		return api.Errorf(api.ErrBadRequest, "", "malformed JSON at byte %d: %v", se.Offset, se)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return api.Errorf(api.ErrBadRequest, "", "malformed JSON: unexpected end of input")
	default:
		return api.Errorf(api.ErrBadRequest, "", "malformed JSON: %v", err)
	}
}

func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Float64, reflect.Float32:
		return "a number"
	case reflect.Slice:
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(typeName(t.Elem()), "a "), "an ") + "s"
	case reflect.Map:
		return "an object of strings"
	case reflect.Bool:
		return "a boolean"
	default:
		return fmt.Sprint(t)
	}
}
