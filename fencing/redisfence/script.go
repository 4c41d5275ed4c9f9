package redisfence

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"
)

// preamble compares the fence's mark (KEYS[1], "<cluster hex> <revision>")
// with the token (ARGV[1], ARGV[2]) and raises it; a refusal returns before
// any write. Revisions are compared as decimal strings, by length and then
// bytes, because Lua's numbers are doubles and lose integers above 2^53.
const preamble = `local mark = redis.call('GET', KEYS[1])
if mark then
  local c, r = string.match(mark, '^(%x+) (%d+)$')
  if not c then return {'bad', mark} end
  if c ~= ARGV[1] then return {'cluster', mark} end
  if #r > #ARGV[2] or (#r == #ARGV[2] and r > ARGV[2]) then return {'stale', mark} end
end
local token = ARGV[1] .. ' ' .. ARGV[2]
if mark ~= token then redis.call('SET', KEYS[1], token) end
`

// interpreter applies the ops encoded in ARGV[3:]: per op its command (or
// "#i", the i-th raw script), how many keys it takes from KEYS[2:] in order,
// how many arguments follow, and the arguments. A missing result (false,
// or a raw script that returns nothing) is kept, as a nil reply, in its place.
const interpreter = `local out = {'ok'}
local k, a = 2, 3
while a <= #ARGV do
  local cmd, nk, na = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local keys, args = {}, {}
  for i = 1, nk do keys[i] = KEYS[k]; k = k + 1 end
  for i = 1, na do args[i] = ARGV[a + 2 + i] end
  a = a + 3 + na
  local s, r = string.match(cmd, '^#(%d+)$'), nil
  if s then
    r = scripts[tonumber(s)](keys, args)
  else
    for i = 1, na do keys[nk + i] = args[i] end
    r = redis.call(cmd, unpack(keys))
  end
  if r == nil then r = false end
  out[#out + 1] = r
end
return out
`

// resetScript makes the mark name cluster ARGV[1] at revision 0, unless it
// already names that cluster.
const resetScript = `local mark = redis.call('GET', KEYS[1])
if mark and string.match(mark, '^(%x+) ') == ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1] .. ' 0')
return 1
`

// script is a Lua body and its SHA1, the name EVALSHA runs it by.
type script struct {
	body string
	sha  string
}

func newScript(body string) script {
	sum := sha1.Sum([]byte(body))
	return script{body: body, sha: hex.EncodeToString(sum[:])}
}

var (
	plainScript = newScript(preamble + "local scripts = {}\n" + interpreter)
	resetMark   = newScript(resetScript)
)

// scriptFor returns the script that runs ops: the fixed one, or, when ops
// hold raw bodies, one with those bodies as local functions, in order.
func scriptFor(ops []Op) script {
	var raw []string
	for _, op := range ops {
		if op.body != "" {
			raw = append(raw, op.body)
		}
	}
	if len(raw) == 0 {
		return plainScript
	}
	var b strings.Builder
	b.WriteString(preamble)
	b.WriteString("local scripts = {}\n")
	for i, body := range raw {
		// Each body is its own function: its return ends it alone, and
		// its KEYS and ARGV are its own.
		b.WriteString("scripts[")
		b.WriteString(itoa(i + 1))
		b.WriteString("] = function(KEYS, ARGV)\n")
		b.WriteString(body)
		b.WriteString("\nend\n")
	}
	b.WriteString(interpreter)
	return newScript(b.String())
}
