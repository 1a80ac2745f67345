package compat

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/isrlab/isrlab/compose/pki"
	"github.com/isrlab/isrlab/internal/proctest"
)

// mtlsFiles are a test CA (ca.pem), the brokers' keystore (one
// certificate for 127.0.0.1) and a client certificate and key it signed,
// as PEM files in a test directory.
type mtlsFiles struct {
	ca, brokerKS, cert, key string
}

func newMTLSFiles(t *testing.T) mtlsFiles {
	t.Helper()
	v := pki.For(time.Now(), time.Hour)
	ca, err := pki.NewCA("isrlab compat CA", v)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(cn string, hosts ...string) pki.Pair {
		p, err := ca.Issue(cn, hosts, v)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	broker, cl := issue("broker", "127.0.0.1", "localhost"), issue("client")
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p, err := pki.WriteFile(dir, name, b)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	return mtlsFiles{ca: write("ca.pem", ca.CertPEM), brokerKS: write("broker.pem", broker.Keystore()),
		cert: write("client.pem", cl.CertPEM), key: write("client.key", cl.KeyPEM)}
}

// startMTLSCluster starts 3 brokers, each with its PLAINTEXT listener (for
// the brokers between themselves and the test's own checks) and an SSL
// listener with ssl.client.auth=required; it returns the cluster and the
// SSL listeners' addresses.
func startMTLSCluster(t *testing.T, f mtlsFiles) (*proctest.Cluster, []string) {
	t.Helper()
	ports := proctest.FreePorts(t, 3)
	var ssl []string
	perBroker := map[int32][]string{}
	cl := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 3,
		Overrides: append([]string{
			"inter.broker.listener.name=PLAINTEXT",
			"ssl.keystore.type=PEM",
			"ssl.keystore.location=" + f.brokerKS,
			"ssl.truststore.location=" + f.ca,
			"listener.name.ssl.ssl.client.auth=required",
		}, overrides...),
		BrokerOverrides: perBroker,
		// The SSL listener goes beside the PLAINTEXT one StartCluster
		// picked: listeners is set again, both named.
		BeforeBrokers: func(addrs map[int32]string) {
			for id, addr := range addrs {
				a := fmt.Sprintf("127.0.0.1:%d", ports[id-1])
				ssl = append(ssl, a)
				perBroker[id] = []string{"listeners=PLAINTEXT://" + addr + ",SSL://" + a}
			}
		},
	})
	slices.Sort(ssl)
	return cl, ssl
}

// tlsRefusal is what a client's error says when the broker refused its
// handshake for want of a certificate: TLS 1.3's certificate_required
// alert ("tls: certificate required", OpenSSL's "tlsv13 alert certificate
// required"), or TLS 1.2's bad_certificate.
var tlsRefusal = regexp.MustCompile(`(?i)certificate[ _]required|bad[ _]certificate`)

// refusalSaid is what a client says instead, where it may say something
// else. kafka-python 2.0.2 probes the broker's version at construction by
// sending ApiVersions and, 0.1 s later, Metadata on the same connection;
// the broker has closed it after its alert, so the raw ssl exception that
// escapes the constructor is the alert when Python's ssl reads it first
// and "EOF occurred in violation of protocol" (ssl.SSLEOFError) when the
// write comes first.
var refusalSaid = map[string]*regexp.Regexp{
	"kafka-python": regexp.MustCompile(`(?i)certificate[ _]required|bad[ _]certificate|ssl\.SSLEOFError: EOF occurred in violation of protocol`),
}

// TestMutualTLS: every client of the matrix produces to and consumes from
// a 3-broker cluster over SSL listeners that require a client certificate
// (ssl.client.auth=required), offering one signed by the cluster's CA, and
// reads back what it produced; offering none, its handshake is refused and
// the client reports the refusal as an error, within jobTimeout, having
// stored nothing. A client that is not installed skips saying what is
// missing.
func TestMutualTLS(t *testing.T) {
	f := newMTLSFiles(t)
	cl, ssl := startMTLSCluster(t, f)
	withCert := &jobTLS{CA: f.ca, Cert: f.cert, Key: f.key}
	for _, c := range []client{franz(), saramaRow(sarama.MaxVersion), kafkaGo(), kcat(), confluentPython(), kafkaPython(), kafkajs()} {
		t.Run(c.name, func(t *testing.T) {
			if m := c.missing(); m != "" {
				t.Skipf("%s is not installed (scripts/deps.sh installs it): %s", c.name, m)
			}
			t.Run("client certificate", func(t *testing.T) {
				topic := name("mtls", c.name)
				createTopic(t, cl, topic, 3)
				recs := makeRecords("m", 9, 3)
				j := job{Capability: "produce", Bootstrap: ssl, Topic: topic, Partitions: 3, Records: recs, TLS: withCert}
				r := runJob(t, c, j)
				_, noHeaders := r.NotOffered["headers"]
				for i := range recs {
					recs[i].Offset = int64(i / 3)
				}
				j.Capability = "consume"
				r = runJob(t, c, j)
				_, noConsumedHeaders := r.NotOffered["headers"]
				sameRecords(t, "records read back over mutual TLS", r.Records, recs, !noHeaders && !noConsumedHeaders)
			})
			t.Run("no client certificate", func(t *testing.T) {
				topic := name("mtls-refused", c.name)
				createTopic(t, cl, topic, 3)
				ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
				defer cancel()
				_, err := c.run(ctx, t, job{Capability: "produce", Bootstrap: ssl, Topic: topic, Partitions: 3,
					Records: makeRecords("r", 3, 3), TLS: &jobTLS{CA: f.ca}})
				switch {
				case err == nil:
					t.Fatal("the client produced without a client certificate on listeners with ssl.client.auth=required")
				case ctx.Err() != nil:
					t.Fatalf("the client reported no error within %v, only the test's deadline: %v", jobTimeout, err)
				case !cmp.Or(refusalSaid[c.name], tlsRefusal).MatchString(err.Error()):
					t.Fatalf("the client's error does not say the TLS handshake was refused: %v", err)
				}
				t.Logf("refused: %s", proctest.Tail(err.Error(), 30))
				kc := cl.Client()
				defer kc.Close()
				ends, err := kadm.NewClient(kc).ListEndOffsets(ctx, topic)
				if err != nil {
					t.Fatal(err)
				}
				ends.Each(func(o kadm.ListedOffset) {
					switch {
					case o.Err != nil:
						t.Errorf("partition %d: %v", o.Partition, o.Err)
					case o.Offset != 0:
						t.Errorf("partition %d holds %d records the refused client sent", o.Partition, o.Offset)
					}
				})
			})
		})
	}
}
