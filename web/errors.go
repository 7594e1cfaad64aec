package web

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlog"
)

// statusOf is the one table mapping application error codes to HTTP
// statuses.
var statusOf = map[ledger.Code]int{
	ledger.CodeInvalid:      http.StatusBadRequest,
	ledger.CodeNotFound:     http.StatusNotFound,
	ledger.CodeConflict:     http.StatusConflict,
	ledger.CodeUnauthorized: http.StatusUnauthorized,
	ledger.CodeForbidden:    http.StatusForbidden,
	ledger.CodeTooLarge:     http.StatusRequestEntityTooLarge,
	ledger.CodeUnsupported:  http.StatusUnsupportedMediaType,
	ledger.CodePrecondition: http.StatusConflict,
	ledger.CodeInternal:     http.StatusInternalServerError,
	ledger.CodeRateLimited:  http.StatusTooManyRequests,
	ledger.CodeStorageFull:  http.StatusInsufficientStorage,
	ledger.CodeUnavailable:  http.StatusServiceUnavailable,
}

// APIError is the JSON body of every API error.
type APIError struct {
	Code    ledger.Code `json:"code"`
	Message string      `json:"message"`
	Field   string      `json:"field,omitempty"`
}

// errorBody returns the status and body for err. Internal errors are logged
// by the caller and shown as "internal error".
func errorBody(err error) (int, APIError) {
	var te *tlog.TamperError
	if errors.As(err, &te) {
		return http.StatusInternalServerError, APIError{Code: ledger.CodeInternal, Message: te.Error()}
	}
	var le *ledger.Error
	if errors.As(err, &le) {
		st, ok := statusOf[le.Code]
		if !ok {
			st = http.StatusInternalServerError
		}
		if st == http.StatusInternalServerError {
			return st, APIError{Code: ledger.CodeInternal, Message: "internal error"}
		}
		return st, APIError{Code: le.Code, Message: le.Error(), Field: le.Field}
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return http.StatusRequestEntityTooLarge, APIError{Code: ledger.CodeTooLarge, Message: fmt.Sprintf("request body is larger than the limit of %d bytes", mbe.Limit)}
	}
	return http.StatusInternalServerError, APIError{Code: ledger.CodeInternal, Message: "internal error"}
}

// errorRetries reports whether err says how soon to try again (see
// setRetryAfter).
func errorRetries(err error) bool {
	var ra interface{ RetryAfter() time.Duration }
	return errors.As(err, &ra)
}

// setRetryAfter sets Retry-After on a 503 whose cause says how soon to try
// again (a store whose database connection was lost: the pool reconnects
// on the next request); a refusal of the log's state (the tampered state)
// carries none, as waiting does not change it.
func setRetryAfter(w http.ResponseWriter, st int, err error) {
	var ra interface{ RetryAfter() time.Duration }
	if st == http.StatusServiceUnavailable && errors.As(err, &ra) {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(ra.RetryAfter()/time.Second))))
	}
}
