package fencingtest

import (
	"net"
	"sync"
)

// ports keeps the ports of a stopped member bound. Each connection is
// accepted and closed at once, which a client or a peer takes for a member
// that is down, as it takes a refused connection.
type ports struct {
	listeners []net.Listener
	wg        sync.WaitGroup
}

// holdPorts binds what it can of hosts: one taken already (in the moment
// between the member's stop and this call) is left, and Restart reports it.
func holdPorts(hosts ...string) *ports {
	p := &ports{}
	for _, h := range hosts {
		l, err := net.Listen("tcp", h)
		if err != nil {
			continue
		}
		p.listeners = append(p.listeners, l)
		p.wg.Go(func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return // closed by release
				}
				c.Close()
			}
		})
	}
	return p
}

// release unbinds the ports and waits for their accept loops; a nil p has
// none.
func (p *ports) release() {
	if p == nil {
		return
	}
	for _, l := range p.listeners {
		l.Close()
	}
	p.wg.Wait()
}
