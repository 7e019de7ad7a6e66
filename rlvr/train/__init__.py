"""Training: SFT on verified demonstrations, online GRPO against the enclave, and next-token
pretraining of the CPU default (through the SFT loop), over one optimizer backend.

Floors inside the package (each module imports only those before it):

    backend, batching, policy_dir, curves     shared by every trainer
    sft_config, demos, sft_output, sft        SFT: params, demonstration selection, the loop
    probe                                     SFT's stop signal: parse errors of sampled calls
    pretrain, copy_probe, policy_init         the initial policy: pretraining and its probe
    curriculum, pathology, grpo_config, grpo_state, grpo_batch, grpo_behaviour,
    grpo_update, grpo_draws, grpo_producer, grpo_metrics, grpo_checkpoint, sampler, grpo
                                              GRPO, one concern per module; `grpo` loops

A stage is "load params -> select -> train -> write":

    params = load_sft_params()                                   # rlvr.train.sft_config
    sel = select_demonstrations(rows, params)                    # rlvr.train.demos
    write_selection(sel, "data/sft/sft_data.parquet", "data/sft/sft_drops.parquet")
    curves = LossCurves(then=mlflow_logger)                      # rlvr.train.curves
    result = train_sft(base_dir, sel.train, sel.val, params, out_dir, log=curves,
                       on_eval=parse_error_probe)                # rlvr.train.sft
    write_loss_csv("plots/sft_loss.csv", curves.rows)
"""
