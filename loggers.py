"""Watching a run live: TensorBoard and Weights & Biases, beside metrics.jsonl (always written).

    log_to: [tensorboard, wandb]        # in the config, or log_to='[tensorboard]' on the command line
    tensorboard --logdir runs/           # every run's <out_dir>/tensorboard

Every value of every metrics.jsonl row goes to each logger under the same key, with the update as
the step (the update-0 evaluation at step 0); null values are left out. The resolved config is
recorded with the run: TensorBoard text "config" at step 0, the W&B run's config.

Resume: a resumed run continues the same TensorBoard log (purge_step drops the steps logged past
the checkpoint, which the resumed run logs again) and the same W&B run (its id is kept in
<out_dir>/wandb_id.txt): the rows metrics.jsonl kept that W&B lacks are sent again, none twice
(WandB.__init__). A resumed run recomputes every step exactly, so the values agree.
"""
import glob
import importlib
import json
import os
import secrets
import struct
import sys

import yaml

WANDB_ID_FILE = "wandb_id.txt"


def check(cfg: dict) -> None:
    """Refuse, before any long work, a logger whose package or login is missing."""
    if "tensorboard" in cfg["log_to"]:
        try:
            importlib.import_module("torch.utils.tensorboard")  # needs the tensorboard package
        except ImportError as e:
            raise ImportError(f"log_to has tensorboard but it cannot be imported ({e}): "
                              f"pip install tensorboard, or drop it from log_to") from None
    if "wandb" in cfg["log_to"]:
        try:
            import wandb
        except ImportError:
            raise ImportError("log_to has wandb but the wandb package is missing: pip install "
                              "wandb, or drop it from log_to") from None
        mode = os.environ.get("WANDB_MODE", "online").lower()
        if mode not in ("offline", "disabled", "dryrun") and not wandb.api.api_key:
            raise PermissionError("log_to has wandb but no W&B login was found: run `wandb login` "
                                  "(or set WANDB_API_KEY), or set WANDB_MODE=offline to write the "
                                  "run to files and upload it later with `wandb sync`")


def open_loggers(cfg: dict, out_dir: str, resumed_at) -> list:
    """The loggers of log_to, for a run that starts after update `resumed_at` (None: a fresh run,
    or a resume with no checkpoint yet, which starts over at update 0), opened after
    metrics.jsonl was cut back to the checkpoint."""
    return [{"tensorboard": TensorBoard, "wandb": WandB}[name](cfg, out_dir, resumed_at)
            for name in cfg["log_to"]]


def scalars(row: dict) -> dict:
    return {k: v for k, v in row.items()
            if k != "update" and isinstance(v, (int, float)) and not isinstance(v, bool)}


class TensorBoard:
    def __init__(self, cfg: dict, out_dir: str, resumed_at):
        from torch.utils.tensorboard import SummaryWriter
        # purge_step: TensorBoard's readers drop the events at and after it from earlier files
        self.writer = SummaryWriter(os.path.join(out_dir, "tensorboard"),
                                    purge_step=0 if resumed_at is None else resumed_at + 1)
        if resumed_at is None:
            self.writer.add_text("config", "```\n" + yaml.safe_dump(cfg, sort_keys=False) + "```", 0)

    def log(self, row: dict) -> None:
        for key, value in scalars(row).items():
            self.writer.add_scalar(key, value, row["update"])
        self.writer.flush()  # a killed run keeps every step it logged (resume re-logs the rest)

    def close(self) -> None:
        self.writer.close()


class WandB:
    def __init__(self, cfg: dict, out_dir: str, resumed_at):
        import wandb
        id_file = os.path.join(out_dir, WANDB_ID_FILE)
        if os.path.exists(id_file):
            run_id = open(id_file).read().strip()
        else:
            run_id = secrets.token_hex(4)  # not `random`: the run's RNG streams stay untouched
            with open(id_file, "w") as f:
                f.write(run_id + "\n")
        self.run = wandb.init(project=cfg["wandb"]["project"], entity=cfg["wandb"]["entity"],
                              group=cfg["wandb"]["group"], name=os.path.basename(out_dir.rstrip("/")),
                              id=run_id, resume="allow", dir=out_dir, config=cfg)
        # What an earlier process of this run logged and W&B kept: offline, its files say; online,
        # the server drops steps below the run's current one by itself. wandb writes its file in
        # 32 KiB blocks, so a killed process leaves W&B behind metrics.jsonl: send the rows that
        # metrics.jsonl kept (up to the checkpoint) and W&B lacks, then the new ones.
        self.logged_through = offline_last_step(out_dir, run_id) if self.run.offline else -1
        metrics = os.path.join(out_dir, "metrics.jsonl")
        if os.path.exists(metrics):
            with open(metrics) as f:
                for line in f:
                    self.log(json.loads(line))

    def log(self, row: dict) -> None:
        if row["update"] > self.logged_through:
            self.run.log(scalars(row), step=row["update"])
            self.logged_through = row["update"]

    def close(self) -> None:
        self.run.finish()


def offline_last_step(out_dir: str, run_id: str) -> int:
    """The last step that earlier offline processes of W&B run `run_id` wrote to their files in
    out_dir/wandb (-1: none, or files this reader cannot parse, whose steps are then sent again:
    W&B drops the repeats when the run is synced)."""
    last = -1
    for path in glob.glob(os.path.join(out_dir, "wandb", f"offline-run-*-{run_id}", f"run-{run_id}.wandb")):
        try:
            last = max([last] + [step for step, _ in read_wandb_history(path)])
        except Exception as e:  # noqa: BLE001 - a format this reader does not know
            print(f"warning: cannot read {path} ({type(e).__name__}: {e}); W&B may get some steps "
                  f"twice (dropped when synced)", file=sys.stderr)
    return last


def read_wandb_history(path: str) -> list:
    """[(step, {key: value})] of the history records of a .wandb file: W&B's transaction log, in
    LevelDB's log format (32 KiB blocks of chunks with a 7-byte header: crc32, length, type),
    holding W&B's protobuf Records (wandb.proto). wandb has no Python reader for it any more."""
    from wandb.proto import wandb_internal_pb2
    with open(path, "rb") as f:
        data = f.read()
    pos, records, pending = 7, [], b""  # the file opens with a 7-byte W&B header
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        length, kind = struct.unpack("<HB", data[pos + 4:pos + 7]) if left >= 7 else (0, 0)
        if kind == 0:  # the padding at the end of a block
            pos += left
            continue
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL, LAST: a record is complete (2, 3: its first, middle chunks)
            records.append(pending)
            pending = b""
    history = []
    for raw in records:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json)
                     for item in record.history.item}
            history.append((int(items.pop("_step")), items))
    return history
