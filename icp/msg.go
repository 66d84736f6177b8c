// Package icp speaks the Internet Cache Protocol, version 2 (RFC 2186), with
// siblings and parents: the codec, the query fan-out the forwarder runs
// before it plans a GET or HEAD, and the listener that answers other
// caches' queries from peerd's store (contract section 15).
package icp

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Opcode is an ICP message type (RFC 2186 section 1.2; 21-23 are the
// additions Squid and the RFC's appendix use).
type Opcode uint8

const (
	OpInvalid     Opcode = 0
	OpQuery       Opcode = 1
	OpHit         Opcode = 2
	OpMiss        Opcode = 3
	OpErr         Opcode = 4
	OpSecho       Opcode = 10
	OpDecho       Opcode = 11
	OpMissNoFetch Opcode = 21
	OpDenied      Opcode = 22
	OpHitObj      Opcode = 23
)

func (o Opcode) String() string {
	switch o {
	case OpQuery:
		return "ICP_OP_QUERY"
	case OpHit:
		return "ICP_OP_HIT"
	case OpMiss:
		return "ICP_OP_MISS"
	case OpErr:
		return "ICP_OP_ERR"
	case OpSecho:
		return "ICP_OP_SECHO"
	case OpDecho:
		return "ICP_OP_DECHO"
	case OpMissNoFetch:
		return "ICP_OP_MISS_NOFETCH"
	case OpDenied:
		return "ICP_OP_DENIED"
	case OpHitObj:
		return "ICP_OP_HIT_OBJ"
	}
	return fmt.Sprintf("ICP_OP_%d", uint8(o))
}

// Version is the ICP version peerd sends (Squid's ICPv2).
const Version = 2

const (
	// HeaderLen is the fixed header: opcode, version, length, request
	// number, options, option data, sender host address.
	HeaderLen = 20
	// MaxLen is the largest ICP message (Squid's SQUID_UDP_SO_RCVBUF
	// aside, RFC 2186 caps URLs by the 16-bit length).
	MaxLen = 16384
)

// Errors of Parse; each names what is wrong with the datagram.
var (
	ErrShort   = errors.New("icp: shorter than the 20-byte header")
	ErrLength  = errors.New("icp: message length field does not match the datagram")
	ErrVersion = errors.New("icp: not ICP version 2 or 3")
	ErrOpcode  = errors.New("icp: unknown opcode")
	ErrURL     = errors.New("icp: URL missing, empty or not NUL-terminated")
)

// Message is one ICP message. URL aliases the parsed datagram.
type Message struct {
	Op         Opcode
	Version    uint8
	ReqNum     uint32
	Options    uint32
	OptionData uint32
	Sender     [4]byte
	// Requester is the QUERY payload's requester host address.
	Requester [4]byte
	URL       []byte
}

// Parse reads one datagram into m, allocating nothing. A datagram that is
// not a well-formed ICP message is an error and m is then unspecified.
func (m *Message) Parse(b []byte) error {
	if len(b) < HeaderLen {
		return ErrShort
	}
	if int(binary.BigEndian.Uint16(b[2:4])) != len(b) {
		return ErrLength
	}
	m.Op, m.Version = Opcode(b[0]), b[1]
	if m.Version != 2 && m.Version != 3 {
		return ErrVersion
	}
	m.ReqNum = binary.BigEndian.Uint32(b[4:8])
	m.Options = binary.BigEndian.Uint32(b[8:12])
	m.OptionData = binary.BigEndian.Uint32(b[12:16])
	copy(m.Sender[:], b[16:20])
	m.Requester = [4]byte{}
	payload := b[HeaderLen:]
	switch m.Op {
	case OpQuery:
		if len(payload) < 4 {
			return ErrURL
		}
		copy(m.Requester[:], payload[:4])
		payload = payload[4:]
	case OpHit, OpMiss, OpErr, OpSecho, OpDecho, OpMissNoFetch, OpDenied, OpHitObj:
	default:
		return ErrOpcode
	}
	end := -1
	for i, c := range payload {
		if c == 0 {
			end = i
			break
		}
	}
	if end <= 0 {
		return ErrURL
	}
	m.URL = payload[:end]
	return nil
}

// Append appends m's wire form to dst (the length field is computed; the
// version is m.Version, or Version when zero).
func (m *Message) Append(dst []byte) []byte {
	start := len(dst)
	v := m.Version
	if v == 0 {
		v = Version
	}
	dst = append(dst, byte(m.Op), v, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, m.ReqNum)
	dst = binary.BigEndian.AppendUint32(dst, m.Options)
	dst = binary.BigEndian.AppendUint32(dst, m.OptionData)
	dst = append(dst, m.Sender[:]...)
	if m.Op == OpQuery {
		dst = append(dst, m.Requester[:]...)
	}
	dst = append(dst, m.URL...)
	dst = append(dst, 0)
	binary.BigEndian.PutUint16(dst[start+2:], uint16(len(dst)-start))
	return dst
}
