package ledger

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// Code classifies an application error. The web package maps each code to
// one HTTP status in a single table.
type Code string

// The error codes.
const (
	CodeInvalid      Code = "invalid"      // bad input: HTTP 400
	CodeNotFound     Code = "not_found"    // HTTP 404
	CodeConflict     Code = "conflict"     // HTTP 409
	CodeUnauthorized Code = "unauthorized" // no or bad credentials: HTTP 401
	CodeForbidden    Code = "forbidden"    // credentials lack the scope: HTTP 403
	CodeTooLarge     Code = "too_large"    // body over the cap: HTTP 413
	CodeUnsupported  Code = "unsupported"  // unsupported media or format: HTTP 415
	CodeInternal     Code = "internal"     // HTTP 500, shown as "internal error"
	CodePrecondition Code = "precondition" // a state requirement not met (e.g. approve an unready release): HTTP 409
	CodeRateLimited  Code = "rate_limited" // too many failed authentications from one client address: HTTP 429
	CodeStorageFull  Code = "storage_full" // the disk holding the database is full: HTTP 507
	CodeUnavailable  Code = "unavailable"  // the service refuses the act in its present state (a tampered log): HTTP 503
)

// IsStorageFull reports whether err is (or wraps) a full disk: ENOSPC, or
// SQLite's SQLITE_FULL, whose fixed message is "database or disk is full"
// (https://sqlite.org/rescode.html#full). An *Error of CodeStorageFull is
// one too.
func IsStorageFull(err error) bool {
	if err == nil {
		return false
	}
	var e *Error
	if errors.As(err, &e) && e.Code == CodeStorageFull {
		return true
	}
	return errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), "database or disk is full")
}

// StorageFull returns the CodeStorageFull *Error for a write (op) that
// failed on a full disk; its message names the cause and that nothing of
// the write was kept, never a path or the database's text.
func StorageFull(op string, err error) *Error {
	return &Error{Code: CodeStorageFull, Message: "the disk holding the database is full (" + op + " failed): nothing of this write was recorded; free space on the server and retry", Err: err}
}

// Error is the one application error type. Field names the offending input
// field (JSON path such as "subject.commit" or "[3].lane") where there is one.
type Error struct {
	Code    Code
	Message string
	Field   string
	Err     error // wrapped cause, may be nil
}

func (e *Error) Error() string {
	msg := e.Message
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	if e.Err != nil && e.Message == "" {
		return e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// FieldError returns a CodeInvalid *Error naming field.
func FieldError(field, format string, args ...any) *Error {
	return &Error{Code: CodeInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, CodeInternal
// for any other non-nil error, and "" for nil.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// ErrNotFound is returned (wrapped in an *Error with CodeNotFound) by stores
// when a record does not exist; test with errors.Is.
var ErrNotFound = errors.New("not found")

// NotFound returns a CodeNotFound *Error wrapping ErrNotFound.
func NotFound(format string, args ...any) *Error {
	return &Error{Code: CodeNotFound, Message: fmt.Sprintf(format, args...), Err: ErrNotFound}
}
