package clients

import (
	"fmt"

	"github.com/IBM/sarama"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	kgscram "github.com/segmentio/kafka-go/sasl/scram"
	"github.com/xdg-go/scram"
)

// SASL is how the in-process drivers authenticate to a secured cluster:
// the mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512), user and
// password. TLS is not here: it is in the dialer the lab gives them
// (Env.Dial completes the handshake), so a driver turns on only SASL.
type SASL struct {
	Mechanism string
	User      string
	Password  string
}

// String hides the password.
func (s SASL) String() string { return s.Mechanism + " as " + s.User }

func (s SASL) check() error {
	switch s.Mechanism {
	case sarama.SASLTypePlaintext, sarama.SASLTypeSCRAMSHA256, sarama.SASLTypeSCRAMSHA512:
		return nil
	}
	return fmt.Errorf("sasl.mechanism %q: the in-process drivers take PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.Mechanism)
}

// sarama turns SASL on in c: a SaslHandshake then SaslAuthenticate (v1)
// on every connection, SCRAM through xdg-go/scram (sarama leaves the
// SCRAM client to the application).
func (s SASL) sarama(c *sarama.Config) {
	c.Net.SASL.Enable, c.Net.SASL.Handshake = true, true
	c.Net.SASL.Version = sarama.SASLHandshakeV1
	c.Net.SASL.Mechanism = sarama.SASLMechanism(s.Mechanism)
	c.Net.SASL.User, c.Net.SASL.Password = s.User, s.Password
	switch s.Mechanism {
	case sarama.SASLTypeSCRAMSHA256:
		c.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.SHA256} }
	case sarama.SASLTypeSCRAMSHA512:
		c.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.SHA512} }
	}
}

// scramClient is sarama's SCRAM client over one xdg-go/scram
// conversation.
type scramClient struct {
	hash scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

func (c *scramClient) Begin(user, password, authzID string) error {
	cl, err := c.hash.NewClient(user, password, authzID)
	if err != nil {
		return err
	}
	c.conv = cl.NewConversation()
	return nil
}

func (c *scramClient) Step(challenge string) (string, error) { return c.conv.Step(challenge) }

func (c *scramClient) Done() bool { return c.conv.Done() }

// kafkaGo is kafka-go's mechanism (its Transport's and Dialer's SASL).
func (s SASL) kafkaGo() (sasl.Mechanism, error) {
	switch s.Mechanism {
	case sarama.SASLTypePlaintext:
		return plain.Mechanism{Username: s.User, Password: s.Password}, nil
	case sarama.SASLTypeSCRAMSHA256:
		return kgscram.Mechanism(kgscram.SHA256, s.User, s.Password)
	default:
		return kgscram.Mechanism(kgscram.SHA512, s.User, s.Password)
	}
}
