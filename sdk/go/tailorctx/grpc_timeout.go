package tailorctx

import (
	"math"
	"math/bits"
	"strconv"
)

// GrpcTimeoutHeader is the gRPC metadata key for the time remaining.
const GrpcTimeoutHeader = "grpc-timeout"

const grpcMaxValue = 99_999_999

var grpcUnits = []struct {
	unit byte
	ns   uint64
}{{'n', 1}, {'u', 1e3}, {'m', 1e6}, {'S', 1e9}, {'M', 60e9}, {'H', 3600e9}}

// GrpcTimeoutEncode writes remaining ns in the finest unit whose count fits in
// 8 digits, rounded up (as grpc-go does). 0 is "0n".
func GrpcTimeoutEncode(remaining uint64) string {
	for _, u := range grpcUnits {
		count := remaining / u.ns
		if remaining%u.ns != 0 {
			count++
		}
		if count <= grpcMaxValue {
			return strconv.FormatUint(count, 10) + string(u.unit)
		}
	}
	panic("unreachable: 2^64 ns is about 5.1 million hours")
}

// GrpcTimeoutDecode is the timeout in ns, saturating at 2^64-1. Accepts 1-8
// digits (leading zeros and 0 included) and a unit in H M S m u n. Errors, in
// order: more than 9 bytes (ErrTooLong), under 2 bytes or a bad unit
// (ErrMalformed), a non-digit (ErrInvalidNumber).
func GrpcTimeoutDecode(v string) (uint64, error) {
	if len(v) > 9 {
		return 0, ErrTooLong
	}
	if len(v) < 2 {
		return 0, ErrMalformed
	}
	var ns uint64
	for _, u := range grpcUnits {
		if u.unit == v[len(v)-1] {
			ns = u.ns
		}
	}
	if ns == 0 {
		return 0, ErrMalformed
	}
	var count uint64
	for i := 0; i < len(v)-1; i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, ErrInvalidNumber
		}
		count = count*10 + uint64(v[i]-'0')
	}
	hi, lo := bits.Mul64(count, ns)
	if hi != 0 {
		return math.MaxUint64, nil
	}
	return lo, nil
}

// GrpcTimeoutFromDeadline is the grpc-timeout for deadline at now; ok is false
// when there is no deadline. A passed deadline is "0n".
func GrpcTimeoutFromDeadline(deadline, now uint64) (v string, ok bool) {
	if deadline == Never {
		return "", false
	}
	if deadline < now {
		return GrpcTimeoutEncode(0), true
	}
	return GrpcTimeoutEncode(deadline - now), true
}

// GrpcTimeoutToDeadline is now + the timeout, saturating to Never.
func GrpcTimeoutToDeadline(v string, now uint64) (uint64, error) {
	t, err := GrpcTimeoutDecode(v)
	if err != nil {
		return 0, err
	}
	if sum, carry := bits.Add64(now, t, 0); carry == 0 {
		return sum, nil
	}
	return Never, nil
}
