package keyspace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// MarshalLeased writes v, a struct whose lease field JSON skips, as a JSON
// object with the lease added last as "lease", in hex: as etcdctl, the
// library's logs and its keys write a lease. v must not itself implement
// json.Marshaler with this call (pass a type without the method).
func MarshalLeased(v any, lease int64) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	obj, ok := bytes.CutSuffix(b, []byte("}"))
	if !ok {
		return nil, fmt.Errorf("lease: %T is not written as an object", v)
	}
	if len(obj) > 1 {
		obj = append(obj, ',')
	}
	return fmt.Appendf(obj, `"lease":"%s"}`, strconv.FormatInt(lease, 16)), nil
}

// UnmarshalLeased reads what MarshalLeased writes: the object into v, and
// returns its lease.
func UnmarshalLeased(b []byte, v any) (int64, error) {
	var hex struct {
		Lease string `json:"lease"`
	}
	if err := json.Unmarshal(b, v); err != nil {
		return 0, err
	}
	if err := json.Unmarshal(b, &hex); err != nil {
		return 0, err
	}
	lease, err := strconv.ParseInt(hex.Lease, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("lease %q: %w", hex.Lease, err)
	}
	return lease, nil
}
