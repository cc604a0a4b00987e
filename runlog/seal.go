package runlog

// Sealed chunks. A chunk stops growing when the log rolls to the next one
// (or when the process that wrote it dies: the next Open starts a fresh
// chunk). Its bytes are then final, so a digest taken when it seals tells,
// at any later time, whether they are still the bytes that were written:
// the SHA-256 of the chunk file and of its pack, with their sizes, in
// NNN.seal beside them:
//
//	"LHSL" [version u8 = 1] [3 zero bytes] [base u64 LE]
//	[chunk bytes u64 LE] [chunk SHA-256] [pack bytes u64 LE] [pack SHA-256]
//	[CRC32C u32 LE of all the bytes before it]
//
// The writer hashes what it writes (sealer), so rolling costs no read.
// A chunk whose writer died unsealed is sealed by the scrub pass after
// Open (scrub.go), once every record and blob in it checks.

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"os"
	"path/filepath"

	"github.com/longhaul-rl/longhaul/store"
)

const (
	sealVersion = 1
	sealSize    = 4 + 4 + 8 + 8 + 32 + 8 + 32 + 4
)

var sealMagic = [4]byte{'L', 'H', 'S', 'L'}

func sealName(base uint64) string { return fmt.Sprintf("%020d.seal", base) }

// seal is what a chunk's seal file records.
type seal struct {
	base                uint64
	chunkSize, packSize uint64
	chunkSum, packSum   [32]byte
}

func (s seal) encode() []byte {
	b := append(sealMagic[:0:0], sealMagic[:]...)
	b = append(b, sealVersion, 0, 0, 0)
	b = binary.LittleEndian.AppendUint64(b, s.base)
	b = binary.LittleEndian.AppendUint64(b, s.chunkSize)
	b = append(b, s.chunkSum[:]...)
	b = binary.LittleEndian.AppendUint64(b, s.packSize)
	b = append(b, s.packSum[:]...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// readSeal returns the seal of the chunk at base; ok is false when there
// is none. A seal that does not check is an error (the scrub pass then
// verifies the chunk record by record and seals it again).
func readSeal(dir string, base uint64) (s seal, ok bool, err error) {
	path := filepath.Join(dir, sealName(base))
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return seal{}, false, nil
	}
	if err != nil {
		return seal{}, false, err
	}
	if len(b) != sealSize || [4]byte(b[:4]) != sealMagic || b[4] != sealVersion ||
		crc32.Checksum(b[:sealSize-4], castagnoli) != binary.LittleEndian.Uint32(b[sealSize-4:]) {
		return seal{}, false, corruptf("seal %s does not check", path)
	}
	le := binary.LittleEndian
	s = seal{base: le.Uint64(b[8:]), chunkSize: le.Uint64(b[16:]), packSize: le.Uint64(b[56:])}
	copy(s.chunkSum[:], b[24:56])
	copy(s.packSum[:], b[64:96])
	if s.base != base {
		return seal{}, false, corruptf("seal %s names chunk %d", path, s.base)
	}
	return s, true, nil
}

// writeSeal durably writes s as its chunk's seal.
func writeSeal(fs store.FS, dir string, s seal) error {
	path := filepath.Join(dir, sealName(s.base))
	tmp := path + ".tmp"
	err := store.WriteFile(fs, tmp, s.encode())
	if err == nil {
		err = fs.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(fs, dir)
	}
	if err != nil {
		return fmt.Errorf("runlog: seal chunk %d: %w", s.base, err)
	}
	return nil
}

// sealer hashes the bytes the syncer writes to the current chunk and
// pack. It is owned by the syncer goroutine (and by Open before that).
type sealer struct {
	base                uint64
	chunk, pack         hash.Hash
	chunkSize, packSize uint64
}

// start begins hashing the fresh chunk at base, whose header is written.
func (h *sealer) start(base uint64) {
	*h = sealer{base: base, chunk: sha256.New(), pack: sha256.New()}
	h.wrote(chunkHeader(base), nil)
}

func (h *sealer) wrote(recs, pack []byte) {
	h.chunk.Write(recs)
	h.pack.Write(pack)
	h.chunkSize += uint64(len(recs))
	h.packSize += uint64(len(pack))
}

func (h *sealer) seal() seal {
	s := seal{base: h.base, chunkSize: h.chunkSize, packSize: h.packSize}
	h.chunk.Sum(s.chunkSum[:0])
	h.pack.Sum(s.packSum[:0])
	return s
}
