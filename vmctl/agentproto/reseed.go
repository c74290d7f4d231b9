package agentproto

// MinReseedBytes and MaxReseedBytes bound ReseedRequest.Entropy: at least
// 32 bytes (the 256 bits the kernel's CRNG is seeded with), at most 512.
const (
	MinReseedBytes = 32
	MaxReseedBytes = 512
)

// ReseedRequest is the request of OpReseed: random bytes from the host
// that the guest mixes into its kernel's entropy pool, credited as
// entropy, before it reseeds its CRNG. A guest restored from a snapshot
// (or resumed from disk) otherwise goes on drawing from the CRNG state
// its memory was saved with, the same in every fork.
type ReseedRequest struct {
	// Entropy holds MinReseedBytes..MaxReseedBytes random bytes (base64
	// in JSON) from the host's CSPRNG.
	Entropy []byte `json:"entropy"`
}

// ReseedResponse is the FrameResponse of OpReseed.
type ReseedResponse struct {
	// CreditedBits is the entropy credited with RNDADDENTROPY: 8 per
	// byte given.
	CreditedBits int `json:"credited_bits"`
	// Reseeded says whether the CRNG was reseeded at once (RNDRESEEDCRNG);
	// false when the kernel refused it (too old, or its CRNG not ready
	// yet: then the credited entropy seeds it).
	Reseeded bool `json:"reseeded"`
}

// Validate checks the entropy's length. Errors are *Error with
// CodeInvalid.
func (r *ReseedRequest) Validate() error {
	if n := len(r.Entropy); n < MinReseedBytes || n > MaxReseedBytes {
		return invalidf("reseed: %d bytes of entropy: want %d to %d", n, MinReseedBytes, MaxReseedBytes)
	}
	return nil
}
