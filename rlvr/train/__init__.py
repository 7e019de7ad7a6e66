"""Training: the behaviour distribution teacher-forced (`logprobs`), SFT demonstration
selection (`demos`), the `sft:` params (`config`) and the loss-masked SFT trainer (`sft`).

A stage is "load params -> select -> train -> write":

    params = load_sft_params()                                   # rlvr.train.config
    sel = select_demonstrations(rows, params)                    # rlvr.train.demos
    write_selection(sel, "data/sft/sft_data.parquet", "data/sft/sft_drops.parquet")
    curves = LossCurves(then=mlflow_logger)                      # rlvr.train.sft
    result = train_sft(base_dir, sel.train, sel.val, params, out_dir, log=curves,
                       on_eval=parse_error_probe)
    write_loss_csv("plots/sft_loss.csv", curves.rows)
"""
