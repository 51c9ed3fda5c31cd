"""The files a user pastes or a machine reads, as text: recommend.env, nccl_tuner.conf, engine flags. Pure."""
