package api

import (
	"errors"
	"fmt"
)

// ErrorType classifies why a request could not be carried out as asked.
// It is the result's error.type, and it is also an error: a class that
// errors.Is understands anywhere in a chain, in the manner of containerd's
// errdefs. Code below the server says what went wrong with Errorf or Wrap
// (or wraps a class with %w); the server alone turns the class into an
// HTTP status (see StatusOf in internal/server).
type ErrorType string

// Error classes. Each maps to one HTTP status in the server.
const (
	ErrBadRequest    ErrorType = "bad_request"      // malformed or invalid request (400)
	ErrTooLarge      ErrorType = "too_large"        // request body or a field over its size limit (413)
	ErrOverLimit     ErrorType = "over_limit"       // a limit above the daemon's maximum (400)
	ErrUnknownPython ErrorType = "unknown_python"   // no imported interpreter matches (400)
	ErrDependency    ErrorType = "dependency_error" // dependencies could not be resolved or built (422)
	ErrForbidden     ErrorType = "forbidden"        // the caller is not allowed (403)
	ErrNotFound      ErrorType = "not_found"        // no such object, e.g. environment (404)
	ErrInUse         ErrorType = "in_use"           // the object is in use, e.g. attached to a run (409)
	ErrBusy          ErrorType = "busy"             // the run queue is full (429)
	ErrUnavailable   ErrorType = "unavailable"      // the daemon is shutting down (503)
	ErrInternal      ErrorType = "internal"         // the daemon failed (500)
	ErrCanceled      ErrorType = "canceled"         // the caller went away

	// Sessions (see SessionRequest).
	ErrSessionNotFound ErrorType = "session_not_found" // unknown, expired, deleted, or another uid's (404)
	ErrSessionBusy     ErrorType = "session_busy"      // another run in it is in progress (409)
	ErrSessionLost     ErrorType = "session_lost"      // its interpreter died; delete it (410)
)

// ErrorTypes lists every error class, in the order above: what a
// result's error.type may be (the MCP server's schemas enumerate it; a
// test holds it to the constants).
var ErrorTypes = []ErrorType{
	ErrBadRequest, ErrTooLarge, ErrOverLimit, ErrUnknownPython, ErrDependency,
	ErrForbidden, ErrNotFound, ErrInUse, ErrBusy, ErrUnavailable, ErrInternal, ErrCanceled,
	ErrSessionNotFound, ErrSessionBusy, ErrSessionLost,
}

// Error implements error, so that a class can be wrapped with %w and
// found with errors.Is.
func (t ErrorType) Error() string { return string(t) }

// Error is the result's error object. It carries its class for errors.Is
// and, when it was made by Wrap, the error it classifies for errors.As
// and the daemon's log.
type Error struct {
	Type    ErrorType `json:"type"`
	Message string    `json:"message"`
	// Field names the request field at fault, when there is one.
	Field string `json:"field,omitempty"`

	cause error
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %s", e.Type, e.Field, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Type, e.Message)
}

// Is reports whether target is e's class.
func (e *Error) Is(target error) bool {
	t, ok := target.(ErrorType)
	return ok && t == e.Type
}

// Unwrap returns the error that Wrap classified, if any.
func (e *Error) Unwrap() error { return e.cause }

// Errorf builds an *Error of class t about field (empty when no single
// field is at fault).
func Errorf(t ErrorType, field, format string, args ...any) *Error {
	return &Error{Type: t, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Wrap classifies err as t, naming field; its message is err's text.
// errors.Is(Wrap(t, f, err), t) holds, and so does errors.Is for anything
// err itself wraps.
func Wrap(t ErrorType, field string, err error) *Error {
	return &Error{Type: t, Field: field, Message: err.Error(), cause: err}
}

// ErrorOf is the error a caller is told about err: the first *Error in
// its chain; else, for a class wrapped with %w, that class with err's
// text; else an internal error with err's text. The server never sends an
// internal error's text to a caller (it logs it); see internal/server.
func ErrorOf(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var t ErrorType
	if errors.As(err, &t) {
		return &Error{Type: t, Message: err.Error(), cause: err}
	}
	return &Error{Type: ErrInternal, Message: err.Error(), cause: err}
}
