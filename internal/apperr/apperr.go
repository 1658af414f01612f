// Package apperr is the one vocabulary of errors that domain packages return
// and httpapi turns into statuses, so that no handler decides a status code on
// its own and nothing a client sent ends as a 500.
package apperr

import (
	"errors"
	"fmt"
	"strings"
)

// Code classifies an error for the client.
type Code string

const (
	Invalid       Code = "invalid"       // 400: the request is wrong; Fields says where
	Unauthorized  Code = "unauthorized"  // 401
	NotFound      Code = "not_found"     // 404, also for another tenant's objects
	Conflict      Code = "conflict"      // 409: duplicate or state conflict
	Unprocessable Code = "unprocessable" // 422: well formed but refused (a webhook URL to a private address)
	TooLarge      Code = "too_large"     // 413
	Unavailable   Code = "unavailable"   // 503: a dependency is down; retry later
	Upstream      Code = "upstream"      // 502: Stripe (or another upstream) refused
)

// FieldError names one invalid field.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Error is a classified error with a message safe to show to the client.
type Error struct {
	Code    Code
	Message string
	Fields  []FieldError
}

func (e *Error) Error() string {
	if len(e.Fields) == 0 {
		return e.Message
	}
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Message
	}
	return e.Message + " (" + strings.Join(parts, "; ") + ")"
}

// New makes a classified error.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of the first *Error in err's chain, or "".
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// As returns the *Error in err's chain.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// Validation collects field errors, as XInput.Validate() methods do.
type Validation struct{ fields []FieldError }

// Add records a field error.
func (v *Validation) Add(field, format string, args ...any) {
	v.fields = append(v.fields, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// Err is nil when no field was bad.
func (v *Validation) Err() error {
	if len(v.fields) == 0 {
		return nil
	}
	return &Error{Code: Invalid, Message: "request validation failed", Fields: v.fields}
}

// Invalidf is a validation error about one field.
func Invalidf(field, format string, args ...any) *Error {
	return &Error{Code: Invalid, Message: "request validation failed",
		Fields: []FieldError{{Field: field, Message: fmt.Sprintf(format, args...)}}}
}
