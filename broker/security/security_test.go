package security

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/isrlab/isrlab/kafkaconfig"
)

// TestScramRFC7677 runs the SCRAM-SHA-256 example of RFC 7677 section 3
// through the server side.
func TestScramRFC7677(t *testing.T) {
	salt, _ := base64.StdEncoding.DecodeString("W22ZaJ0SNY7soEsUEjb6gQ==")
	salted, err := SaltedPassword(ScramSHA256, "pencil", salt, 4096)
	if err != nil {
		t.Fatal(err)
	}
	cred, err := CredentialFromSalted(ScramSHA256, salt, salted, 4096)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := scramHash(ScramSHA256)
	srv := &scramServer{
		mechanism: ScramSHA256, h: h,
		lookup: func(user string) (ScramCredential, bool, error) { return cred, user == "user", nil },
		fake:   func(string) ScramCredential { return cred },
		nonce:  func() string { return "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0" },
	}
	out, done, err := srv.next([]byte("n,,n=user,r=rOprNGfwEbeRWgbNEkqO"))
	if err != nil || done {
		t.Fatal(err, done)
	}
	if want := "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"; string(out) != want {
		t.Fatalf("server-first %q, want %q", out, want)
	}
	out, done, err = srv.next([]byte("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="))
	if err != nil || !done {
		t.Fatal(err, done)
	}
	if want := "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="; string(out) != want {
		t.Fatalf("server-final %q, want %q", out, want)
	}
	// The stored form reads back.
	back, err := ParseScramCredential(cred.String())
	if err != nil || back.String() != cred.String() {
		t.Fatalf("round trip %q -> %q, %v", cred, back, err)
	}
	// A wrong proof is refused with the generic error.
	srv.step = 0
	srv.next([]byte("n,,n=user,r=rOprNGfwEbeRWgbNEkqO"))
	if _, _, err := srv.next([]byte("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAAZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")); !errors.Is(err, errBadCredentials) {
		t.Fatalf("wrong proof: %v", err)
	}
}

func TestParseJAAS(t *testing.T) {
	j, err := ParseJAAS(`org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="a b;c" user_admin="x" user_alice=y;`)
	if err != nil {
		t.Fatal(err)
	}
	if j.Username != "admin" || j.Password != "a b;c" || j.Users["admin"] != "x" || j.Users["alice"] != "y" {
		t.Fatalf("%+v", j)
	}
	if _, err := ParseJAAS(`Module username="secret-value"`); err == nil || strings.Contains(err.Error(), "secret-value") {
		t.Fatalf("bad line: %v (an error must not quote values)", err)
	}
}

func TestListeners(t *testing.T) {
	cases := []struct {
		overrides []string
		want      string // inter-broker listener, or the error's text
	}{
		{[]string{"listeners=PLAINTEXT://127.0.0.1:9092"}, "PLAINTEXT"},
		{[]string{"listeners=SASL_SSL://:9093,PLAINTEXT://:9092"}, "PLAINTEXT"},
		{[]string{"listeners=SASL_SSL://:9093,PLAINTEXT://:9092", "inter.broker.listener.name=SASL_SSL"}, "SASL_SSL"},
		{[]string{"listeners=SASL_SSL://:9093", "security.inter.broker.protocol=SASL_SSL"}, "SASL_SSL"},
		{[]string{"listeners=INTERNAL://:9093,EXTERNAL://:9094", "listener.security.protocol.map=INTERNAL:SSL,EXTERNAL:SASL_SSL", "inter.broker.listener.name=INTERNAL"}, "INTERNAL"},
		{[]string{"listeners=SASL_SSL://:9093"}, "no listener of that name"},
		{[]string{"listeners=FOO://:9093"}, "no security protocol"},
		{[]string{"listeners=SSL://:9093,SSL://:9094"}, "given twice"},
		{[]string{"listeners=SSL://:9093", "inter.broker.listener.name=SSL", "security.inter.broker.protocol=SSL"}, "only one of"},
	}
	for _, c := range cases {
		cfg, _, err := kafkaconfig.Load("", append([]string{"log.dirs=/tmp/x"}, c.overrides...))
		if err != nil {
			t.Fatal(err)
		}
		_, ib, err := Listeners(cfg)
		got := ib
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, c.want) {
			t.Errorf("%v: got %q, want %q", c.overrides, got, c.want)
		}
	}
}

// TestScramFinalNonceSuffix: the client-final nonce must end with the
// server-first nonce, as Kafka's ScramSaslServer checks it, so the
// longer nonce of librdkafka before 2.6.1 (its own nonce once more in
// front) authenticates; one that does not end with it is refused.
func TestScramFinalNonceSuffix(t *testing.T) {
	salt := []byte("isrlab-salt")
	salted, err := SaltedPassword(ScramSHA512, "pencil", salt, 4096)
	if err != nil {
		t.Fatal(err)
	}
	cred, err := CredentialFromSalted(ScramSHA512, salt, salted, 4096)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := scramHash(ScramSHA512)
	// Prefixes: none (RFC 5802), librdkafka's repeated nonce, anything;
	// a tail after the server's nonce is refused.
	for _, prefix := range []string{"", "clientnonce", "x"} {
		for _, tail := range []string{"", "extra"} {
			first := "n=user,r=clientnonce"
			srv := &scramServer{
				mechanism: ScramSHA512, h: h,
				lookup: func(user string) (ScramCredential, bool, error) { return cred, user == "user", nil },
				fake:   func(string) ScramCredential { return cred },
				nonce:  func() string { return "servernonce" },
			}
			sf, _, err := srv.next([]byte("n,," + first))
			if err != nil {
				t.Fatal(err)
			}
			withoutProof := "c=biws,r=" + prefix + "clientnonceservernonce" + tail
			auth := []byte(first + "," + string(sf) + "," + withoutProof)
			clientKey := hmacOf(h, salted, []byte("Client Key"))
			sig := hmacOf(h, cred.StoredKey, auth)
			proof := make([]byte, len(sig))
			for i := range sig {
				proof[i] = clientKey[i] ^ sig[i]
			}
			_, done, err := srv.next([]byte(withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof)))
			want := tail == ""
			if want && (err != nil || !done) {
				t.Errorf("nonce %q: %v", withoutProof, err)
			}
			if !want && (err == nil || !strings.Contains(err.Error(), "nonce")) {
				t.Errorf("nonce %q accepted (%v)", withoutProof, err)
			}
		}
	}
}
