package tailorctx

// Error is why a context (or a grpc-timeout) read off the wire was rejected.
// A rejected context is never fatal: serve the request as if it carried none,
// and count the error by Kind (see Stats). When an input breaks several rules,
// the first in the order of docs/wire-format.md decides, so every
// implementation names the same kind.
type Error struct {
	kind string
	msg  string
}

func (e *Error) Error() string { return "tailor context: " + e.msg }

// Kind is the stable snake_case name shared with the Rust and Python codecs
// and the test vectors; use it as a metric label.
func (e *Error) Kind() string { return e.kind }

// The error kinds, one per rule. Compare with errors.Is or ==.
var (
	// ErrTooLong: a context value is at most 128 bytes (after percent-decoding
	// when from baggage); baggage at most 8192 bytes; a grpc-timeout at most
	// 8 digits and a unit.
	ErrTooLong = &Error{"too_long", "too long: a context is at most 128 bytes, a baggage header at most 8192, a grpc-timeout at most 8 digits and a unit"}
	// ErrInvalidChar: every byte of a context is one of A-Z a-z 0-9 - . _ ~.
	ErrInvalidChar = &Error{"invalid_char", "invalid character: a context uses only A-Z a-z 0-9 - . _ ~"}
	// ErrMalformed: empty input, a version that is not a decimal number, an
	// empty field, a bad key id or tag; for grpc-timeout, under 2 bytes or a bad unit.
	ErrMalformed = &Error{"malformed", "malformed: see docs/wire-format.md for the grammar"}
	// ErrUnsupportedVersion: the version is well formed but not 1.
	ErrUnsupportedVersion = &Error{"unsupported_version", "unsupported version: this codec reads version 1 only"}
	// ErrUnknownField: every field key is one of g d c k h i m.
	ErrUnknownField = &Error{"unknown_field", "unknown field: version 1 has the fields g, d, c, k, h, i, m"}
	// ErrDuplicateField: a field appears at most once.
	ErrDuplicateField = &Error{"duplicate_field", "duplicate field"}
	// ErrOutOfOrder: fields appear in the order g d c k h i m.
	ErrOutOfOrder = &Error{"out_of_order", "fields out of order: they appear as g, d, c, k, h, i, m"}
	// ErrMissingField: g, c, k and h are required; i and m come together.
	ErrMissingField = &Error{"missing_field", "missing field: g, c, k and h are required; i and m come together"}
	// ErrInvalidNumber: numbers are decimal digits without leading zeros.
	ErrInvalidNumber = &Error{"invalid_number", "invalid number: decimal digits without leading zeros"}
	// ErrOutOfRange: g < 2^64, d < 2^64-1, c and h <= 255, k < 2^32.
	ErrOutOfRange = &Error{"out_of_range", "number out of range: g < 2^64, d < 2^64-1, c and h <= 255, k < 2^32"}
	// ErrAmbiguous: at most one tailor-context header and one tailor baggage member.
	ErrAmbiguous = &Error{"ambiguous", "ambiguous: more than one tailor-context header or tailor baggage member"}
	// ErrMissingMAC: where a MAC is required, the context carries one.
	ErrMissingMAC = &Error{"missing_mac", "missing MAC: this hop requires a signed context"}
	// ErrUnknownKey: the key id names a key this hop holds.
	ErrUnknownKey = &Error{"unknown_key", "unknown key id: this hop holds no key by that id"}
	// ErrBadMAC: the tag is the HMAC-SHA256 (first 128 bits) of every byte before ".m".
	ErrBadMAC = &Error{"bad_mac", "bad MAC: the tag does not match the context"}
)

// ErrorKinds lists every kind in the shared order (the order of Stats).
var ErrorKinds = []*Error{
	ErrTooLong, ErrInvalidChar, ErrMalformed, ErrUnsupportedVersion, ErrUnknownField, ErrDuplicateField,
	ErrOutOfOrder, ErrMissingField, ErrInvalidNumber, ErrOutOfRange, ErrAmbiguous, ErrMissingMAC,
	ErrUnknownKey, ErrBadMAC,
}

// KeyError is why a Key or Keyring could not be built (configuration, not wire).
type KeyError struct{ kind, msg string }

func (e *KeyError) Error() string { return "tailor context key: " + e.msg }

// Kind is "invalid_id", "short_secret" or "duplicate_id".
func (e *KeyError) Kind() string { return e.kind }

var (
	// ErrInvalidKeyID: a key id is 1-16 bytes of A-Z a-z 0-9 - _.
	ErrInvalidKeyID = &KeyError{"invalid_id", "key id must be 1-16 characters of A-Z a-z 0-9 - _"}
	// ErrShortSecret: a secret is at least 16 bytes.
	ErrShortSecret = &KeyError{"short_secret", "secret must be at least 16 bytes (32 random bytes recommended)"}
	// ErrDuplicateKeyID: key ids in a keyring are unique.
	ErrDuplicateKeyID = &KeyError{"duplicate_id", "duplicate key id in keyring"}
)
