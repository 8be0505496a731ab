package tailorctx

// Native fuzz targets. In the normal suite they run their seed corpus only;
// to search (from sdk/go): go test -run '^$' -fuzz FuzzDecode -fuzztime 60s ./tailorctx

import "testing"

func seeds(f *testing.F) {
	key, _ := NewKey("k1", []byte("0123456789abcdef0123456789abcdef"))
	ctx := Context{GAT: 1732272000123456789, Deadline: 1732272000125456789, Class: 1, Fanout: 4, Hop: 2}
	for _, s := range []string{
		"", "1", "1.", "1.g5.c0.k1.h0", Encode(ctx), EncodeSigned(ctx, key),
		Encode(Context{GAT: Never, Deadline: Never - 1, Class: 255, Fanout: 1<<32 - 1, Hop: 255}),
		"2.g5", "1.g05.c0.k1.h0", "1.g5.c0.k1.h0.ik1", "tailor=1%2Eg5%2Ec0%2Ek1%2Eh0",
	} {
		f.Add(s)
	}
}

// FuzzDecode: no input panics; an accepted value is canonical (it re-encodes
// to the very same bytes) and every byte of it is a value byte.
func FuzzDecode(f *testing.F) {
	seeds(f)
	f.Fuzz(func(t *testing.T, s string) {
		d, err := Decode(s)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("%q: error %v is not an *Error", s, err)
			}
			return
		}
		if again := d.Encode(); again != s {
			t.Fatalf("accepted %q but re-encodes as %q", s, again)
		}
		for i := 0; i < len(s); i++ {
			if !isValueByte(s[i]) {
				t.Fatalf("accepted %q with byte %q", s, s[i])
			}
		}
	})
}

// FuzzBaggage: no baggage header panics; a decoded member survives rewriting.
func FuzzBaggage(f *testing.F) {
	seeds(f)
	f.Fuzz(func(t *testing.T, header string) {
		d, found, err := DecodeBaggage(header)
		if err != nil || !found {
			return
		}
		rewritten := BaggageWith(header, d.Encode())
		d2, found2, err2 := DecodeBaggage(rewritten)
		if len(rewritten) <= MaxBaggageLen && (err2 != nil || !found2 || d2 != d) {
			t.Fatalf("%q -> %q: %+v %v %v", header, rewritten, d2, found2, err2)
		}
		// Stripping removes every member of ours and nothing else of meaning.
		if w := BaggageWithout(rewritten); len(w) <= MaxBaggageLen {
			if _, f, err := DecodeBaggage(w); f || err != nil {
				t.Fatalf("%q: BaggageWithout left %q: %v %v", header, w, f, err)
			}
		}
	})
}

// FuzzGrpcTimeout: decode never panics; encode/decode round-trips within one unit.
func FuzzGrpcTimeout(f *testing.F) {
	f.Add("1n", uint64(0))
	f.Add("99999999H", uint64(1<<64-1))
	f.Fuzz(func(t *testing.T, v string, remaining uint64) {
		_, _ = GrpcTimeoutDecode(v)
		enc := GrpcTimeoutEncode(remaining)
		back, err := GrpcTimeoutDecode(enc)
		if err != nil || back < remaining {
			t.Fatalf("%d -> %q -> %d, %v", remaining, enc, back, err)
		}
	})
}
