package scheduler

import "errors"

// ErrorKind says whose fault a refused or failed request is, which decides what its client is
// answered; the zero value is the engine's, so an error nobody classified is never blamed on
// the client.
type ErrorKind uint8

// Error kinds.
const (
	ErrorInternal ErrorKind = iota // the engine's fault
	ErrorInvalid                   // the request's own: it will not be served as sent
)

// RequestError is a refusal of a request (Add's), or a failure of its constraint (its Err), that
// says whose fault it is.
type RequestError struct {
	Kind ErrorKind
	Err  error // the reason, for the client
}

func (e *RequestError) Error() string { return e.Err.Error() }

func (e *RequestError) Unwrap() error { return e.Err }

// invalid marks err as the request's own fault.
func invalid(err error) error { return &RequestError{Kind: ErrorInvalid, Err: err} }

// Refusal is what a refused request's item carries: the reason of the first *RequestError in
// err's chain (without the context wrapped around it for the rank's log, such as the engine's
// request id, which the client never saw) and its kind; any other error is the engine's, with
// its whole text.
func Refusal(err error) (reason string, kind ErrorKind) {
	if re, ok := errors.AsType[*RequestError](err); ok {
		return re.Error(), re.Kind
	}
	return err.Error(), ErrorInternal
}
