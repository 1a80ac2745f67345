package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/isrlab/isrlab/broker/coord"
	"github.com/isrlab/isrlab/broker/coord/coordtest"
	"github.com/isrlab/isrlab/broker/security"
	"github.com/isrlab/isrlab/broker/wire"
	"github.com/isrlab/isrlab/compose/pki"
	"github.com/isrlab/isrlab/internal/proctest"
)

// testPKI is a CA with a broker certificate for 127.0.0.1 and a client
// certificate, written as PEM files in a test directory.
type testPKI struct {
	ca                       *pki.CA
	caFile, brokerKS, client string
	clientPair               pki.Pair
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	dir := t.TempDir()
	v := pki.For(time.Now(), time.Hour)
	ca, err := pki.NewCA("isrlab test CA", v)
	if err != nil {
		t.Fatal(err)
	}
	bp, err := ca.Issue("b1", []string{"127.0.0.1", "localhost"}, v)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := ca.Issue("client", nil, v)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{ca: ca, clientPair: cp}
	must := func(name string, b []byte) string {
		path, err := pki.WriteFile(dir, name, b)
		if err != nil {
			t.Fatal(err)
		}
		return path
	}
	p.caFile = must("ca.pem", ca.CertPEM)
	p.brokerKS = must("b1.pem", bp.Keystore())
	p.client = must("client.pem", cp.Keystore())
	return p
}

// clientTLS trusts the test CA, with the client certificate when cert.
func (p *testPKI) clientTLS(t testing.TB, cert bool) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(p.ca.Cert)
	tc := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
	if cert {
		c, err := tls.X509KeyPair(p.clientPair.CertPEM, p.clientPair.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return tc
}

const plainJAAS = `org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";`

// startSecureBroker runs a broker with a SASL_SSL listener (SCRAM and
// PLAIN), a SASL_PLAINTEXT listener (PLAIN), an SSL listener with
// mutual TLS and a PLAINTEXT listener between brokers, in that order.
func startSecureBroker(t testing.TB, p *testPKI, opts []Option, overrides ...string) *testBroker {
	t.Helper()
	ov := append([]string{
		"listeners=SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
		"inter.broker.listener.name=PLAINTEXT",
		"ssl.keystore.location=" + p.brokerKS,
		"ssl.truststore.location=" + p.caFile,
		"listener.name.ssl.ssl.client.auth=required",
		"sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
		"listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN",
		"listener.name.sasl_ssl.plain.sasl.jaas.config=" + plainJAAS,
		"listener.name.sasl_plaintext.plain.sasl.jaas.config=" + plainJAAS,
	}, overrides...)
	return startBrokerWith(t, t.TempDir(), opts, ov...)
}

const (
	lnSASLSSL = iota
	lnSASLPlaintext
	lnSSL
	lnPlaintext
)

// addScram creates user's credential for both SCRAM mechanisms over the
// plaintext listener.
func addScram(t testing.TB, tb *testBroker, user, password string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(tb.Addrs()[lnPlaintext]))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := kadm.NewClient(cl).AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{
		{User: user, Mechanism: kadm.ScramSha256, Iterations: 4096, Password: password},
		{User: user, Mechanism: kadm.ScramSha512, Iterations: 8192, Password: password},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Error(); err != nil {
		t.Fatal(err)
	}
}

// roundTrip produces one record to a new topic and reads it back with cl.
func roundTrip(t *testing.T, cl *kgo.Client, topic string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		return err
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("v")}).FirstErr(); err != nil {
		return err
	}
	cl.AddConsumeTopics(topic)
	for {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return err
		}
		if fs.NumRecords() > 0 {
			if v := string(fs.Records()[0].Value); v != "v" {
				return errors.New("read back " + v)
			}
			return nil
		}
	}
}

func secureClient(t *testing.T, addr string, tc *tls.Config, mech sasl.Mechanism, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	o := []kgo.Opt{kgo.SeedBrokers(addr), kgo.RequestRetries(2)}
	if tc != nil {
		o = append(o, kgo.DialTLSConfig(tc))
	}
	if mech != nil {
		o = append(o, kgo.SASL(mech))
	}
	cl, err := kgo.NewClient(append(o, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func TestSecureHandshakes(t *testing.T) {
	p := newTestPKI(t)
	tb := startSecureBroker(t, p, nil)
	addScram(t, tb, "alice", "alice-secret")
	cases := []struct {
		name     string
		listener int
		tls      bool
		cert     bool
		mech     sasl.Mechanism
	}{
		{"SASL_SSL SCRAM-SHA-256", lnSASLSSL, true, false, scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha256Mechanism()},
		{"SASL_SSL SCRAM-SHA-512", lnSASLSSL, true, false, scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism()},
		{"SASL_SSL PLAIN", lnSASLSSL, true, false, plain.Auth{User: "alice", Pass: "alice-secret"}.AsMechanism()},
		{"SASL_PLAINTEXT PLAIN", lnSASLPlaintext, false, false, plain.Auth{User: "alice", Pass: "alice-secret"}.AsMechanism()},
		{"SSL mutual TLS", lnSSL, true, true, nil},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var tc *tls.Config
			if c.tls {
				tc = p.clientTLS(t, c.cert)
			}
			cl := secureClient(t, tb.Addrs()[c.listener], tc, c.mech)
			if err := roundTrip(t, cl, "secure-"+string(rune('a'+i))); err != nil {
				t.Fatalf("produce and consume: %v", err)
			}
			// Metadata names this listener's addresses: the produce went
			// to the broker through it, not through another listener.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			bm, err := kadm.NewClient(cl).BrokerMetadata(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, port, _ := net.SplitHostPort(tb.Addrs()[c.listener])
			if len(bm.Brokers) != 1 || strconv.Itoa(int(bm.Brokers[0].Port)) != port {
				t.Errorf("metadata brokers %+v, want the listener's port %s", bm.Brokers, port)
			}
		})
	}
}

// TestSecureRefusals: each way in that must fail does, and says why.
func TestSecureRefusals(t *testing.T) {
	p := newTestPKI(t)
	tb := startSecureBroker(t, p, nil)
	addScram(t, tb, "alice", "alice-secret")
	ctx := context.Background()
	ping := func(cl *kgo.Client) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := kadm.NewClient(cl).BrokerMetadata(ctx)
		return err
	}
	const badCreds = "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
	t.Run("wrong password", func(t *testing.T) {
		cl := secureClient(t, tb.Addrs()[lnSASLSSL], p.clientTLS(t, false), scram.Auth{User: "alice", Pass: "wrong"}.AsSha512Mechanism())
		err := ping(cl)
		if !errors.Is(err, kerr.SaslAuthenticationFailed) || !strings.Contains(err.Error(), badCreds) {
			t.Fatalf("err = %v, want SASL_AUTHENTICATION_FAILED: %s", err, badCreds)
		}
	})
	t.Run("unknown user reads as a wrong password", func(t *testing.T) {
		cl := secureClient(t, tb.Addrs()[lnSASLSSL], p.clientTLS(t, false), scram.Auth{User: "mallory", Pass: "alice-secret"}.AsSha512Mechanism())
		err := ping(cl)
		if !errors.Is(err, kerr.SaslAuthenticationFailed) || !strings.Contains(err.Error(), badCreds) {
			t.Fatalf("err = %v, want the same refusal as a wrong password", err)
		}
	})
	t.Run("PLAIN wrong password", func(t *testing.T) {
		cl := secureClient(t, tb.Addrs()[lnSASLPlaintext], nil, plain.Auth{User: "alice", Pass: "nope"}.AsMechanism())
		err := ping(cl)
		if !errors.Is(err, kerr.SaslAuthenticationFailed) || !strings.Contains(err.Error(), "Authentication failed: Invalid username or password") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("unknown mechanism", func(t *testing.T) {
		nc := dialSecure(t, tb.Addrs()[lnSASLPlaintext], nil)
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.SetVersion(1)
		hs.Mechanism = "GSSAPI"
		resp, err := rawRequest(nc, hs)
		if err != nil {
			t.Fatal(err)
		}
		hr := resp.(*kmsg.SASLHandshakeResponse)
		if hr.ErrorCode != kerr.UnsupportedSaslMechanism.Code || strings.Join(hr.SupportedMechanisms, ",") != "PLAIN" {
			t.Fatalf("handshake = %+v, want UNSUPPORTED_SASL_MECHANISM offering PLAIN", hr)
		}
		assertClosed(t, nc)
	})
	t.Run("franz-go with a mechanism the listener lacks", func(t *testing.T) {
		cl := secureClient(t, tb.Addrs()[lnSASLPlaintext], nil, scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha256Mechanism())
		if err := ping(cl); !errors.Is(err, kerr.UnsupportedSaslMechanism) {
			t.Fatalf("err = %v, want UNSUPPORTED_SASL_MECHANISM", err)
		}
	})
	t.Run("request before authentication", func(t *testing.T) {
		nc := dialSecure(t, tb.Addrs()[lnSASLPlaintext], nil)
		// ApiVersions is answered, and lists the SASL and SCRAM APIs.
		av := kmsg.NewPtrApiVersionsRequest()
		av.SetVersion(3)
		av.ClientSoftwareName, av.ClientSoftwareVersion = "test", "1"
		resp, err := rawRequest(nc, av)
		if err != nil {
			t.Fatal(err)
		}
		keys := map[int16]bool{}
		for _, k := range resp.(*kmsg.ApiVersionsResponse).ApiKeys {
			keys[k.ApiKey] = true
		}
		for _, k := range []int16{17, 36, 50, 51} {
			if !keys[k] {
				t.Errorf("ApiVersions does not list API %d (%s)", k, kmsg.NameForKey(k))
			}
		}
		md := kmsg.NewPtrMetadataRequest()
		md.SetVersion(9)
		if _, err := rawRequest(nc, md); err == nil {
			t.Fatal("a Metadata request before authentication was answered")
		}
	})
	t.Run("plaintext client to a TLS listener", func(t *testing.T) {
		cl := secureClient(t, tb.Addrs()[lnSSL], nil, nil, kgo.DialTimeout(3*time.Second))
		if err := ping(cl); err == nil {
			t.Fatal("a plaintext client got metadata from a TLS listener")
		}
	})
	t.Run("mutual TLS without a client certificate", func(t *testing.T) {
		_, err := tls.Dial("tcp", tb.Addrs()[lnSSL], p.clientTLS(t, false))
		if err == nil {
			nc, _ := tls.Dial("tcp", tb.Addrs()[lnSSL], p.clientTLS(t, false))
			_, err = rawRequest(nc, kmsg.NewPtrMetadataRequest())
		}
		if err == nil {
			t.Fatal("a client without a certificate was served on ssl.client.auth=required")
		}
	})
	t.Run("untrusted client certificate", func(t *testing.T) {
		other := newTestPKI(t)
		nc, err := tls.Dial("tcp", tb.Addrs()[lnSSL], &tls.Config{RootCAs: p.clientTLS(t, false).RootCAs, ServerName: "127.0.0.1", Certificates: other.clientTLS(t, true).Certificates})
		if err == nil {
			_, err = rawRequest(nc, kmsg.NewPtrMetadataRequest())
		}
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("err = %v, want a TLS alert about the certificate", err)
		}
	})
	t.Run("untrusted broker certificate", func(t *testing.T) {
		other := newTestPKI(t)
		_, err := tls.Dial("tcp", tb.Addrs()[lnSASLSSL], other.clientTLS(t, false))
		var uae x509.UnknownAuthorityError
		if !errors.As(err, &uae) {
			t.Fatalf("err = %v, want x509: certificate signed by unknown authority", err)
		}
	})
}

// TestExpiredCertificates: a broker certificate past its NotAfter is
// refused by clients, and so is a client certificate by the broker.
func TestExpiredCertificates(t *testing.T) {
	p := newTestPKI(t)
	past := pki.Validity{NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}
	expired, err := p.ca.Issue("expired", []string{"127.0.0.1"}, past)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := pki.WriteFile(t.TempDir(), "expired.pem", expired.Keystore())
	if err != nil {
		t.Fatal(err)
	}
	t.Run("broker", func(t *testing.T) {
		tb := startSecureBroker(t, p, nil, "ssl.keystore.location="+ks)
		_, err := tls.Dial("tcp", tb.Addrs()[lnSASLSSL], p.clientTLS(t, false))
		var inv x509.CertificateInvalidError
		if !errors.As(err, &inv) || inv.Reason != x509.Expired {
			t.Fatalf("err = %v, want x509: certificate has expired", err)
		}
	})
	t.Run("client", func(t *testing.T) {
		tb := startSecureBroker(t, p, nil)
		c, err := tls.X509KeyPair(expired.CertPEM, expired.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		tc := p.clientTLS(t, false)
		tc.Certificates = []tls.Certificate{c}
		nc, err := tls.Dial("tcp", tb.Addrs()[lnSSL], tc)
		if err == nil {
			_, err = rawRequest(nc, kmsg.NewPtrMetadataRequest())
		}
		if err == nil || !strings.Contains(err.Error(), "expired certificate") {
			t.Fatalf("err = %v, want the broker's bad certificate alert (expired certificate)", err)
		}
	})
}

// TestReauthentication: with connections.max.reauth.ms the broker tells
// the client its session lifetime, closes a connection that uses an
// ended session, accepts a re-authentication on the same connection and
// refuses one that changes the user.
func TestReauthentication(t *testing.T) {
	p := newTestPKI(t)
	var skew atomic.Int64
	clock := WithClock(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })
	tb := startSecureBroker(t, p, []Option{clock}, "connections.max.reauth.ms=60000")
	addScram(t, tb, "alice", "alice-secret")
	addScram(t, tb, "bob", "bob-secret")
	ctx := context.Background()
	alice, _ := security.ClientMechanism(security.ScramSHA512, "alice", "alice-secret")
	bob, _ := security.ClientMechanism(security.ScramSHA512, "bob", "bob-secret")
	addrSCRAM := tb.Addrs()[lnSASLSSL]
	dial := func() net.Conn { return dialSecure(t, addrSCRAM, p.clientTLS(t, false)) }
	md := func() kmsg.Request { r := kmsg.NewPtrMetadataRequest(); r.SetVersion(9); return r }

	nc := dial()
	life, err := security.Authenticate(ctx, nc, alice, "test", addrSCRAM)
	if err != nil {
		t.Fatal(err)
	}
	if life != time.Minute {
		t.Fatalf("session lifetime %v, want connections.max.reauth.ms 60000", life)
	}
	if _, err := rawRequest(nc, md()); err != nil {
		t.Fatalf("metadata within the session: %v", err)
	}
	// Re-authenticate as the same user on the same connection.
	if _, err := security.Authenticate(ctx, nc, alice, "test", addrSCRAM); err != nil {
		t.Fatalf("re-authentication: %v", err)
	}
	skew.Store(int64(50 * time.Second))
	if _, err := rawRequest(nc, md()); err != nil {
		t.Fatalf("metadata in the renewed session: %v", err)
	}
	// The session ends without re-authentication: the next request closes
	// the connection.
	skew.Store(int64(2 * time.Minute))
	if _, err := rawRequest(nc, md()); err == nil {
		t.Fatal("a request on an expired session was answered")
	}

	// A re-authentication may not change the principal.
	nc = dial()
	if _, err := security.Authenticate(ctx, nc, alice, "test", addrSCRAM); err != nil {
		t.Fatal(err)
	}
	_, err = security.Authenticate(ctx, nc, bob, "test", addrSCRAM)
	var ae *security.AuthError
	if !errors.As(err, &ae) || !strings.Contains(ae.Message, "Cannot change principals during re-authentication") {
		t.Fatalf("re-authentication as another user: %v", err)
	}
	assertClosed(t, nc)
}

// TestReauthenticationFranzGo: franz-go re-authenticates within the
// session lifetime the broker gives, and its requests keep succeeding.
func TestReauthenticationFranzGo(t *testing.T) {
	p := newTestPKI(t)
	tb := startSecureBroker(t, p, nil, "listener.name.sasl_ssl.scram-sha-512.connections.max.reauth.ms=1000")
	addScram(t, tb, "alice", "alice-secret")
	cl := secureClient(t, tb.Addrs()[lnSASLSSL], p.clientTLS(t, false), scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism())
	if err := roundTrip(t, cl, "reauth"); err != nil {
		t.Fatal(err)
	}
	sc := tb.ls.all[lnSASLSSL].sasl
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for sc.Reauthentications.Load() < 2 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "reauth", Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatalf("produce across re-authentications: %v", err)
		}
	}
}

func dialSecure(t *testing.T, addr string, tc *tls.Config) net.Conn {
	t.Helper()
	var nc net.Conn
	var err error
	if tc != nil {
		nc, err = tls.Dial("tcp", addr, tc)
	} else {
		nc, err = net.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	return nc
}

var rawCorr int32

// rawRequest sends req on nc and reads its response.
func rawRequest(nc net.Conn, req kmsg.Request) (kmsg.Response, error) {
	corr := atomic.AddInt32(&rawCorr, 1)
	b := []byte{0, 0, 0, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	id := "raw"
	b = kbin.AppendNullableString(b, &id)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	if _, err := nc.Write(b); err != nil {
		return nil, err
	}
	frame, err := wire.ReadFrame(nc, 1<<24, nil)
	if err != nil {
		return nil, err
	}
	body := frame[4:]
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if resp.IsFlexible() && req.Key() != wire.ApiVersionsKey {
		r := kbin.Reader{Src: body}
		kmsg.SkipTags(&r)
		body = r.Src
	}
	return resp, resp.ReadFrom(body)
}

// assertClosed fails unless the broker closed nc.
func assertClosed(t *testing.T, nc net.Conn) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !strings.Contains(errString(err), "reset") {
		t.Fatalf("connection still open (read: %v)", err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestSecuredCluster: three brokers with one SASL_SSL listener each, the
// brokers authenticating to each other with SCRAM-SHA-512 as a user
// created in the coordinator before they start (as Kafka's brokers need
// theirs in ZooKeeper). Replication and the controller's requests go over
// it: a topic with three replicas gets all three in its ISR and serves an
// acks=all write, and the admin user creates a client user through
// AlterUserScramCredentials.
func TestSecuredCluster(t *testing.T) {
	p := newTestPKI(t)
	tc := &testCluster{t: t, coord: coordtest.Start(t), brokers: map[int32]*testBroker{}, dirs: map[int32]string{}, ports: map[int32]int{}}
	tc.listeners = func(port int) string { return fmt.Sprintf("SASL_SSL://127.0.0.1:%d", port) }
	tc.extra = []string{
		"inter.broker.listener.name=SASL_SSL",
		"ssl.keystore.location=" + p.brokerKS,
		"ssl.truststore.location=" + p.caFile,
		"sasl.enabled.mechanisms=SCRAM-SHA-512",
		"sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
		`listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="admin-secret";`,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	co, err := coord.Dial(ctx, tc.coord.ClientURLs())
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	cred, err := security.NewScramCredential(security.ScramSHA512, "admin-secret", 4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := co.AlterScramCredentials(ctx, "admin", map[string]string{security.ScramSHA512: cred.String()}, nil); err != nil {
		t.Fatal(err)
	}
	ports := coordtest.FreePorts(t, 3)
	var seeds []string
	for i := 1; i <= 3; i++ {
		id := int32(i)
		tc.dirs[id], tc.ports[id] = t.TempDir(), ports[i-1]
		tc.start(id)
		seeds = append(seeds, fmt.Sprintf("127.0.0.1:%d", ports[i-1]))
	}
	admin := func(user, pass string) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DialTLSConfig(p.clientTLS(t, false)),
			kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	proctest.Eventually(t, 30*time.Second, "three brokers in metadata", func() error {
		// A new client each time: kadm answers from a client's cached
		// metadata.
		cl := admin("admin", "admin-secret")
		defer cl.Close()
		m, err := kadm.NewClient(cl).BrokerMetadata(ctx)
		if err != nil {
			return err
		}
		if len(m.Brokers) != 3 {
			return fmt.Errorf("%d brokers: %+v", len(m.Brokers), m.Brokers)
		}
		return nil
	})
	adm := kadm.NewClient(admin("admin", "admin-secret"))
	res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "alice", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "alice-secret"}})
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatalf("create user alice: %v", err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 3, nil, "secured"); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 30*time.Second, "ISR of three replicas", func() error {
		td, err := adm.ListTopics(ctx, "secured")
		if err != nil {
			return err
		}
		if isr := td["secured"].Partitions[0].ISR; len(isr) != 3 {
			return fmt.Errorf("isr %v", isr)
		}
		return nil
	})
	cl := admin("alice", "alice-secret")
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "secured", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatalf("acks=all produce as alice: %v", err)
	}
	d, err := kadm.NewClient(cl).DescribeUserSCRAMs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d["admin"]; !ok || len(d) != 2 {
		t.Errorf("described users %v, want admin and alice", d)
	}
}

// BenchmarkSecuredProduce: 1 KiB records, acks=1, to one broker through
// its PLAINTEXT listener and through its SASL_SSL listener
// (SCRAM-SHA-512): what TLS costs the produce path.
func BenchmarkSecuredProduce(b *testing.B) {
	p := newTestPKI(b)
	tb := startSecureBroker(b, p, nil)
	addScram(b, tb, "alice", "alice-secret")
	ensureTopic(b, tb.Addrs()[lnPlaintext])
	for _, c := range []struct {
		name     string
		listener int
		opts     []kgo.Opt
	}{
		{"PLAINTEXT", lnPlaintext, nil},
		{"SASL_SSL", lnSASLSSL, []kgo.Opt{kgo.DialTLSConfig(p.clientTLS(b, false)), kgo.SASL(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism())}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(benchRecordSize)
			benchProduceAcks(b, tb.Addrs()[c.listener], b.N, kgo.LeaderAck(), c.opts...)
		})
	}
}

// BenchmarkSASLHandshake: one new connection's TLS handshake and
// SCRAM-SHA-512 authentication (4096 iterations), client and broker in
// one process: what a client pays per connection and the broker per
// reconnect storm.
func BenchmarkSASLHandshake(b *testing.B) {
	p := newTestPKI(b)
	tb := startSecureBroker(b, p, nil)
	addScram(b, tb, "alice", "alice-secret")
	mech, _ := security.ClientMechanism(security.ScramSHA512, "alice", "alice-secret")
	dial := security.SecureDialer(nil, p.clientTLS(b, false), mech, "bench")
	addr := tb.Addrs()[lnSASLSSL]
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		nc, err := dial(context.Background(), "tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		nc.Close()
	}
}

// TestKeystoreReload: a dynamic update of
// listener.name.<l>.ssl.keystore.location on this broker reads the new
// keystore and serves it to new handshakes at once, while a connection
// opened before keeps working; an expired certificate is installed as
// given (clients then refuse it), one for another subject or other
// SANs is refused with INVALID_REQUEST and changes nothing.
func TestKeystoreReload(t *testing.T) {
	p := newTestPKI(t)
	tb := startSecureBroker(t, p, nil)
	dir := t.TempDir()
	issue := func(cn string, hosts []string, v pki.Validity) string {
		pair, err := p.ca.Issue(cn, hosts, v)
		if err != nil {
			t.Fatal(err)
		}
		path, err := pki.WriteFile(dir, cn+strconv.FormatInt(time.Now().UnixNano(), 10)+".pem", pair.Keystore())
		if err != nil {
			t.Fatal(err)
		}
		return path
	}
	// The update goes to this broker over its plaintext listener.
	admin := dialSecure(t, tb.Addrs()[lnPlaintext], nil)
	alter := func(loc string) error {
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		rr := kmsg.NewIncrementalAlterConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeBroker, strconv.Itoa(int(tb.ID()))
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value = "listener.name.ssl.ssl.keystore.location", &loc
		rr.Configs = append(rr.Configs, c)
		req.Resources = append(req.Resources, rr)
		raw, err := rawRequest(admin, req)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(raw.(*kmsg.IncrementalAlterConfigsResponse).Resources[0].ErrorCode)
	}
	open := dialSecure(t, tb.Addrs()[lnSSL], p.clientTLS(t, true))
	if _, err := rawRequest(open, kmsg.NewPtrApiVersionsRequest()); err != nil {
		t.Fatal(err)
	}

	// Another subject, or other SANs: refused, nothing changes.
	for _, bad := range []string{issue("b9", []string{"127.0.0.1", "localhost"}, pki.For(time.Now(), time.Hour)), issue("b1", []string{"127.0.0.1"}, pki.For(time.Now(), time.Hour))} {
		if err := alter(bad); !errors.Is(err, kerr.InvalidRequest) {
			t.Fatalf("a keystore for another subject or SANs: %v, want INVALID_REQUEST", err)
		}
	}
	if nc, err := tls.Dial("tcp", tb.Addrs()[lnSSL], p.clientTLS(t, true)); err != nil {
		t.Fatalf("after the refused updates: %v", err)
	} else {
		nc.Close()
	}

	// Expired: new handshakes fail, the open connection goes on.
	past := pki.Validity{NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Minute)}
	if err := alter(issue("b1", []string{"127.0.0.1", "localhost"}, past)); err != nil {
		t.Fatalf("install an expired certificate: %v", err)
	}
	_, err := tls.Dial("tcp", tb.Addrs()[lnSSL], p.clientTLS(t, true))
	var inv x509.CertificateInvalidError
	if !errors.As(err, &inv) || inv.Reason != x509.Expired {
		t.Fatalf("a handshake after the expired certificate: %v, want x509: certificate has expired", err)
	}
	if _, err := rawRequest(open, kmsg.NewPtrApiVersionsRequest()); err != nil {
		t.Fatalf("the connection opened before: %v", err)
	}

	// Renewed: handshakes succeed again.
	if err := alter(issue("b1", []string{"127.0.0.1", "localhost"}, pki.For(time.Now(), time.Hour))); err != nil {
		t.Fatalf("renew: %v", err)
	}
	nc, err := tls.Dial("tcp", tb.Addrs()[lnSSL], p.clientTLS(t, true))
	if err != nil {
		t.Fatalf("after the renewal: %v", err)
	}
	nc.Close()
}
