// The training library's one header for training programs: the Trainer and its configs
// (raio/train/trainer.h), the context a training function gets (raio/train/context.h) and
// the data-parallel helpers (raio/train/data_parallel.h; includes libtorch).
// Thread-safety: see each header.
#pragma once

#include "raio/train/context.h"
#include "raio/train/data_parallel.h"
#include "raio/train/trainer.h"
