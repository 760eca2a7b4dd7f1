package server

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/cellblock/cellblock/internal/api"
)

// decodeBodies are bodies good and bad, some only a little bad.
var decodeBodies = []string{
	`{"code": "print(1)"}`,
	`{"code": "x", "files": [{"path": "a", "content": "b\n\"q\"\\"}], "env": {"A": "1"}}`,
	` {"code":"x"} `,
	`{"Code": "x"}`,
	`{"code": "x", "nope": 1}`,
	`{"code": "x"} {"code": "y"}`,
	`{"code": "x"} x`,
	`{"code": "x",}`,
	`{"co\u0064e": "x"}`,
	`{"code": 1}`,
	`null`,
	`[]`,
	`{"code": "x", "code": "y"}`,
	`{"code": "x", "inputs": {"nope": {"code": 1}}}`,
	`{"code": "x", "args": ["{\"nope\":1}"]}`,
	`{"code": "x"`,
	`{"code": "x", "timeout_ms": 1.5}`,
	"{\"code\": \"\xff\"}",
	`{"code": "x", "files": [{"path": "a", "content": "b", "extra": 1}]}`,
	`{} }`,
	`{"code": "x"} ]`,
}

// TestDecodeFastAgrees: the one-pass decoding accepts exactly what the
// two passes accept, into the same request, and leaves the errors' words
// to them.
func TestDecodeFastAgrees(t *testing.T) {
	for _, body := range decodeBodies {
		var a, b api.RunRequest
		errA := decodeBody([]byte(body), &a)
		errB := decodeSlow([]byte(body), &b, jsonFields(reflect.TypeOf(b)))
		if (errA == nil) != (errB == nil) || errA != nil && errA.Error() != errB.Error() {
			t.Errorf("%s: %v, the two passes say %v", body, errA, errB)
		}
		ja, _ := json.Marshal(&a)
		jb, _ := json.Marshal(&b)
		if string(ja) != string(jb) {
			t.Errorf("%s: decoded as %s, the two passes as %s", body, ja, jb)
		}
	}
}

func TestTopLevelKeys(t *testing.T) {
	keys, ok := topLevelKeys([]byte(`{"a": {"b": 1, "c": [{"d": 2}]}, "e": "f,\"g\": 1", "h": [1, {"i": 2}]}`))
	if !ok || strings.Join(keys, " ") != "a e h" {
		t.Errorf("%v %v", keys, ok)
	}
	for _, bad := range []string{`[1]`, `"x"`, `{"a\"b": 1}`, ``} {
		if _, ok := topLevelKeys([]byte(bad)); ok {
			t.Errorf("%q: ok", bad)
		}
	}
}

func FuzzDecodeFastAgrees(f *testing.F) {
	for _, b := range decodeBodies {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(bytes.TrimSpace(body)) == 0 {
			return // refused before either pass
		}
		var a, b api.RunRequest
		errA := decodeBody(body, &a)
		errB := decodeSlow(body, &b, jsonFields(reflect.TypeOf(b)))
		if (errA == nil) != (errB == nil) || errA != nil && errA.Error() != errB.Error() {
			t.Fatalf("%q: %v, the two passes say %v", body, errA, errB)
		}
		if errA == nil {
			ja, _ := json.Marshal(&a)
			jb, _ := json.Marshal(&b)
			if string(ja) != string(jb) {
				t.Fatalf("%q: decoded as %s, the two passes as %s", body, ja, jb)
			}
		}
	})
}
