package redisfence

import (
	"strconv"
	"time"
)

// Op is one write (or read) that Fence.Do applies after the fence's check,
// in the same script. Make it with Set, Del, HSet, IncrBy, RPush, Get or
// Script; the zero Op, and one of more than 7000 keys and arguments (Lua
// unpacks 8000 at most), are refused.
type Op struct {
	cmd  string   // the Redis command; "" for a raw script
	body string   // a raw script's Lua body
	keys []string // the keys, which must share the mark's slot
	args []string
	bad  string // why the Op is bad input, found before anything is sent
}

// Set is SET key value with opts; its result is "OK", or nil when an
// IfAbsent or IfPresent condition failed, or, with ReturnOld, the old value
// (nil if none).
func Set(key, value string, opts ...SetOption) Op {
	op := Op{cmd: "SET", keys: []string{key}, args: []string{value}}
	seen := map[string]bool{}
	for _, o := range opts {
		if len(o.args) == 0 || seen[o.group] {
			// Redis would refuse it mid-script, after the mark's raise.
			op.bad = "Set with a zero SetOption, or two of WithTTL and KeepTTL, or of IfAbsent and IfPresent"
		}
		seen[o.group] = true
		op.args = append(op.args, o.args...)
	}
	return op
}

// SetOption is an option of Set: WithTTL, KeepTTL, IfAbsent, IfPresent or
// ReturnOld, as SET's EX/PX, KEEPTTL, NX, XX and GET.
type SetOption struct {
	group string // options of one group exclude each other
	args  []string
}

// WithTTL makes the key expire after d, to the millisecond (SET ... PX);
// d under a millisecond is bad input.
func WithTTL(d time.Duration) SetOption {
	if d < time.Millisecond {
		return SetOption{group: "ttl"}
	}
	return SetOption{"ttl", []string{"PX", strconv.FormatInt(d.Milliseconds(), 10)}}
}

// KeepTTL keeps the key's time to live (SET ... KEEPTTL).
func KeepTTL() SetOption { return SetOption{"ttl", []string{"KEEPTTL"}} }

// IfAbsent sets the key only if it does not exist (SET ... NX).
func IfAbsent() SetOption { return SetOption{"cond", []string{"NX"}} }

// IfPresent sets the key only if it exists (SET ... XX).
func IfPresent() SetOption { return SetOption{"cond", []string{"XX"}} }

// ReturnOld makes Set's result the key's old value (SET ... GET).
func ReturnOld() SetOption { return SetOption{"get", []string{"GET"}} }

// Del is DEL keys, at least one; its result is how many existed.
func Del(keys ...string) Op {
	op := Op{cmd: "DEL", keys: keys}
	if len(keys) == 0 {
		op.bad = "Del without a key"
	}
	return op
}

// HSet is HSET key field value [field value ...], at least one pair; its
// result is how many fields were added.
func HSet(key string, fieldValues ...string) Op {
	op := Op{cmd: "HSET", keys: []string{key}, args: fieldValues}
	if len(fieldValues) == 0 || len(fieldValues)%2 != 0 {
		op.bad = "HSet without field-value pairs"
	}
	return op
}

// IncrBy is INCRBY key n; its result is the new value, an int64, exact up
// to 2^53 (Lua's numbers are doubles; Redis stores the exact value).
func IncrBy(key string, n int64) Op {
	return Op{cmd: "INCRBY", keys: []string{key}, args: []string{strconv.FormatInt(n, 10)}}
}

// RPush is RPUSH key values, at least one; its result is the list's new
// length.
func RPush(key string, values ...string) Op {
	op := Op{cmd: "RPUSH", keys: []string{key}, args: values}
	if len(values) == 0 {
		op.bad = "RPush without a value"
	}
	return op
}

// Get is GET key, a read after the fence's raise: its result is the value,
// or nil. Read what a write will be computed from in the same Do as the
// fence, or in a Do before it under the same token: a read before the
// token's first Do may predate a newer owner's, and its write then lose
// that owner's.
func Get(key string) Op { return Op{cmd: "GET", keys: []string{key}} }

// Script is a raw Lua body, for the writes the other Ops do not make. It
// runs as a function of its own with KEYS set to keys and ARGV to args;
// its result is what it returns, as EVAL would reply it through the
// client (an error reply it returns is a result, not Do's error). It must touch no key outside keys (Redis Cluster requires it,
// and the slot check sees only keys), nor a fence's mark, and not call
// redis.setresp. Keep bodies constant and pass values in args: Redis 7.0
// caches every distinct script until SCRIPT FLUSH.
func Script(body string, keys []string, args ...string) Op {
	return Op{body: body, keys: keys, args: args}
}

func itoa(n int) string { return strconv.Itoa(n) }
