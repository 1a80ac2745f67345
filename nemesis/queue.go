package nemesis

import (
	"context"
	"fmt"
)

func (s *SlowNet) injectQueue(ctx context.Context, env *Env) error {
	return fmt.Errorf("%w: packet delay needs netem, which this kernel lacks", ErrUnsupported)
}

func (s *SlowNet) healQueue(ctx context.Context, env *Env) error { return healTable(env, s.Table) }
