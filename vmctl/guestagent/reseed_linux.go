package guestagent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// reseed serves OpReseed: the host's random bytes go into the kernel's
// pool, credited, and the CRNG is reseeded from it at once.
func (s *server) reseed(fw *agentproto.Writer, req *agentproto.ReseedRequest) error {
	do := s.opts.Reseed
	if do == nil {
		do = kernelReseed
	}
	reseeded, err := do(req.Entropy)
	if err != nil {
		return err
	}
	resp := agentproto.ReseedResponse{CreditedBits: 8 * len(req.Entropy), Reseeded: reseeded}
	s.log.Info("random number generator reseeded", "credited_bits", resp.CreditedBits, "reseeded", reseeded)
	return fw.WriteJSON(agentproto.FrameResponse, resp)
}

// kernelReseed adds entropy to the kernel's input pool with
// RNDADDENTROPY (random(4): struct rand_pool_info, entropy_count in bits,
// crediting it), then forces a CRNG reseed with RNDRESEEDCRNG (Linux >=
// 4.17) so the next getrandom(2) draws from the new seed instead of
// waiting for the CRNG's periodic reseed (up to a minute later on current
// kernels). Both need CAP_SYS_ADMIN. A kernel that refuses RNDRESEEDCRNG
// (EINVAL/ENOTTY: too old; ENODATA: CRNG not ready, so the credited
// entropy seeds it) reports reseeded false.
func kernelReseed(entropy []byte) (bool, error) {
	f, err := os.OpenFile("/dev/random", os.O_WRONLY, 0)
	if err != nil {
		return false, fmt.Errorf("reseed: %w", err)
	}
	defer f.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	info := make([]byte, 8+len(entropy)+3) // buf in whole __u32s
	binary.NativeEndian.PutUint32(info[0:], uint32(8*len(entropy)))
	binary.NativeEndian.PutUint32(info[4:], uint32(len(entropy)))
	copy(info[8:], entropy)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDADDENTROPY, uintptr(unsafe.Pointer(&info[0]))); e != 0 {
		return false, fmt.Errorf("reseed: RNDADDENTROPY: %w", e)
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDRESEEDCRNG, 0); e != 0 {
		if errors.Is(e, unix.EINVAL) || errors.Is(e, unix.ENOTTY) || errors.Is(e, unix.ENODATA) {
			return false, nil
		}
		return false, fmt.Errorf("reseed: RNDRESEEDCRNG: %w", e)
	}
	return true, nil
}
