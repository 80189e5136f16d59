"""Load a checkpoint: a local folder, a Hub id, an alias or a packaged model.

The result is a :class:`Checkpoint`: the transformer backbone, its tokenizer,
and the sentence-transformers "post" modules (pooling, Dense layers,
Normalize) read from ``modules.json`` when present. Weights are read from
safetensors only; pickle checkpoints are refused.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from espresso_export.core.errors import (
    CorruptCheckpointError,
    NotFoundError,
    OfflineError,
    RuntimeFailure,
    UnsupportedModelError,
    ValidationError,
)
from espresso_export.core.formatting import one_line
from espresso_export.core.parsing import under_local_folder
from espresso_export.core.prompts import StUsage
from espresso_export.core.types import Pooling
from espresso_export.model.aliases import packaged_path, resolve_alias
from espresso_export.model.architectures import (
    Architecture,
    default_max_length,
    depth,
    for_model_type,
    hidden_size,
    refuse_custom_code,
)
from espresso_export.model.module_chain import read_json, read_st_layout
from espresso_export.model.post import DenseLayer, Normalize, PostModule
from espresso_export.model.tokenizer_state import tokenizer_state
from espresso_export.model.weight_checks import (
    check_complete,
    check_finite_tensors,
    check_safetensors,
    check_shapes,
    check_tokenizer_fits,
    warn_ignored,
)

log = logging.getLogger(__name__)

PROVENANCE_FILE = "espresso.json"
PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.ckpt", "tf_model.h5")
_HUB_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "tokenizer*", "*/*.json", "*/*.safetensors"]

@dataclass
class Checkpoint:
    model: Any  # transformers.PreTrainedModel (the AutoModel backbone)
    tokenizer: Any
    arch: Architecture
    pooling: Pooling
    source: str  # what the user asked for (alias resolved to Hub id)
    path: Path  # local folder holding the checkpoint
    post: list[PostModule] = field(default_factory=list)  # modules after pooling, in order
    max_seq_length: int | None = None
    do_lower_case: bool = False
    provenance: dict | None = None  # espresso.json of a folder we wrote, if any
    weight_files: list[Path] = field(default_factory=list)
    # the fast tokenizer's truncation and padding as loaded: every call with other settings changes them, and
    # save_pretrained writes whatever the last call left (layout.save_checkpoint restores these first)
    tokenizer_state: dict | None = None
    usage: StUsage = field(default_factory=StUsage)  # prompts and similarity, carried to every output

    @property
    def config(self):
        return self.model.config

    @property
    def depth(self) -> int:
        return depth(self.model.config, self.arch)

    @property
    def hidden_size(self) -> int:
        return hidden_size(self.model.config, self.arch)

    @property
    def output_dim(self) -> int:
        dense = [m for m in self.post if isinstance(m, DenseLayer)]
        return dense[-1].out_features if dense else self.hidden_size

    @property
    def n_params(self) -> int:
        """The encoder's parameters and the Dense head's: what the folder holds (shrink, verify and the card agree)."""
        head = sum(m.weight.numel() + (0 if m.bias is None else m.bias.numel())
                   for m in self.post if isinstance(m, DenseLayer))
        return sum(p.numel() for p in self.model.parameters()) + head

    @property
    def unit_length_output(self) -> bool:
        """Whether an exported graph L2-normalises its output: when the model ends with Normalize, or is scored
        by cosine (unit length changes no cosine, and a dot product on it is one). A dot-product model without
        Normalize (msmarco's "-dot" models) keeps its vectors' lengths: normalising them reorders its results."""
        return bool(self.post and isinstance(self.post[-1], Normalize)) or self.usage.similarity == "cosine"

    @property
    def ese_trained(self) -> bool:
        return bool((self.provenance or {}).get("ese"))

    def weights_sha256(self) -> str:
        h = hashlib.sha256()
        for f in self.weight_files:
            with open(f, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 22), b""):
                    h.update(chunk)
        return h.hexdigest()


def _looks_like_path(spec: str) -> bool:
    return (
        spec.startswith((".", "/", "~"))
        or spec.endswith(("/", os.sep))
        or (os.sep != "/" and os.sep in spec)
        or spec.count("/") > 1
        or under_local_folder(spec)
    )


def resolve(spec: str | os.PathLike, *, revision: str | None = None) -> tuple[str, Path]:
    """Turn a user's model spec into ``(source id, local folder)``.

    Local folders win; then aliases and packaged copies; then the Hub.
    A path-like spec that does not exist says "not found" instead of trying the Hub.
    """
    text = str(spec)
    local = Path(text).expanduser()
    if local.exists():
        if not local.is_dir():
            raise ValidationError(f"{text} is a file, not a model folder")
        return str(local.resolve()), local.resolve()
    hub_id = resolve_alias(text)
    packaged = packaged_path(hub_id)
    if packaged is not None:
        return hub_id, packaged
    if _looks_like_path(text) or "/" not in hub_id:
        why = ("read as a path, since its first part is a folder here" if under_local_folder(text)
               else "and it is not a Hub id like owner/name")
        raise NotFoundError(f"model not found: no folder {text!r} exists ({why})")
    return hub_id, _download(hub_id, revision)


def _hub_unreachable() -> bool:
    """True when the Hub's host name does not even resolve: fail at once instead of retrying for a minute."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False  # huggingface_hub answers from its cache, or says it is offline, without the network
    host = urlparse(constants.ENDPOINT).hostname or ""
    try:
        socket.getaddrinfo(host, 443)
    except (OSError, UnicodeError):
        return True
    return False


def _download(hub_id: str, revision: str | None) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    offline_msg = (
        f"cannot download {hub_id!r}: no local folder of that name exists, the Hugging Face Hub is unreachable "
        "(offline?) and it is not cached; check the path, or pass a local model folder"
    )
    if _hub_unreachable():
        raise OfflineError(offline_msg)
    try:
        return Path(snapshot_download(hub_id, revision=revision, allow_patterns=_HUB_PATTERNS))
    except HFValidationError as e:
        raise NotFoundError(f"model not found: {hub_id!r} is neither a local folder nor a valid Hub id") from e
    except (RepositoryNotFoundError, GatedRepoError) as e:
        raise NotFoundError(f"model not found on the Hub: {hub_id!r} (or it is private/gated and no token is set)") from e
    except RevisionNotFoundError as e:
        raise NotFoundError(f"revision {revision!r} of {hub_id!r} not found on the Hub") from e
    except LocalEntryNotFoundError as e:
        raise OfflineError(offline_msg) from e
    except OSError as e:  # connection errors surface as OSError subclasses
        raise OfflineError(f"cannot download {hub_id!r} from the Hugging Face Hub: {e.__class__.__name__}") from e


def weight_files(folder: Path) -> list[Path]:
    files = sorted(folder.glob("*.safetensors"))
    if files:
        return files
    pickles = [n for n in PICKLE_WEIGHTS if (folder / n).exists()]
    if pickles:
        raise UnsupportedModelError(
            f"{folder} has only pickle weights ({', '.join(pickles)}); espresso-export loads safetensors only. "
            "Convert them first, e.g. AutoModel.from_pretrained(path).save_pretrained(path, safe_serialization=True)"
        )
    raise ValidationError(f"{folder} is not a model folder: no *.safetensors weights")


def _check_finite(model, where: Path) -> None:
    check_finite_tensors(model.state_dict(), where)


def _load_post(kind: str, sub: Path) -> PostModule:
    if kind == "Normalize":
        return Normalize()
    return _load_dense(sub)


def _load_dense(sub: Path) -> DenseLayer:
    from safetensors.torch import load_file

    cfg = read_json(sub / "config.json")

    wfile = sub / "model.safetensors"
    if not wfile.is_file():
        if (sub / "pytorch_model.bin").is_file():
            raise UnsupportedModelError(f"{sub} has only pickle weights (pytorch_model.bin); safetensors only")
        raise CorruptCheckpointError(f"Dense module {sub} has no model.safetensors")
    check_safetensors([wfile])
    state = load_file(str(wfile))
    weight = state.get("linear.weight")
    if weight is None:
        raise CorruptCheckpointError(f"{wfile} has no linear.weight tensor")
    check_finite_tensors(state, wfile)
    return DenseLayer(
        weight=weight.float(),
        bias=state["linear.bias"].float() if "linear.bias" in state else None,
        activation=cfg.get("activation_function", "torch.nn.modules.activation.Tanh"),
    )


def default_pooling(arch: Architecture) -> Pooling:
    # Decoders attend backwards only: the last token is the one that has seen the whole text.
    return Pooling.LAST_TOKEN if arch.decoder else Pooling.MEAN


def _load_model(tdir: Path, arch: Architecture, *, trust_remote_code: bool):
    """The transformers backbone in eval mode, checked finite; a decoder gets its recorded attention switch back.

    Returns the model and the layers made bidirectional (empty for most models)."""
    import torch
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        model, info = AutoModel.from_pretrained(
            str(tdir), trust_remote_code=trust_remote_code, use_safetensors=True, dtype=torch.float32,
            output_loading_info=True, ignore_mismatched_sizes=True,  # mismatches are refused below, by name
        )
    except (OSError, ValueError) as e:
        raise CorruptCheckpointError(f"cannot load the model in {tdir}: {str(e).splitlines()[0]}") from e
    except RuntimeError as e:  # weights that do not fit the config are the folder's fault; threads or memory are not
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "size mismatch" in str(e) or "Error(s) in loading state_dict" in str(e):
            raise CorruptCheckpointError(f"cannot load the model in {tdir}: {first}") from e
        raise RuntimeFailure(f"loading the model in {tdir} failed: {first}") from e
    check_complete(info, tdir)
    check_shapes(info, tdir)
    warn_ignored(info, depth(model.config, arch), tdir)
    model.eval()
    _check_finite(model, tdir)
    bidirectional = []
    if arch.decoder:  # re-install the attention switch the config records (bidirectional.py)
        from espresso_export.model.bidirectional import apply as apply_attention

        bidirectional = apply_attention(model, arch)
    return model, bidirectional


def _load_tokenizer(tdir: Path, *, trust_remote_code: bool):
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(tdir), trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as e:
        raise ValidationError(f"{tdir} has no usable tokenizer (its tokenizer files are missing or unreadable): "
                              f"{one_line(e)}") from e
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    return tokenizer


def load(
    spec: str | os.PathLike,
    *,
    pooling: Pooling | str | None = None,
    trust_remote_code: bool = False,
    revision: str | None = None,
) -> Checkpoint:
    """Load a checkpoint for slicing, training, export or evaluation."""
    source, folder = resolve(spec, revision=revision)
    layout = read_st_layout(folder)
    tdir = layout.transformer_dir
    if not (tdir / "config.json").is_file():
        raise ValidationError(f"{folder} is not a model folder: no config.json")
    config_dict = read_json(tdir / "config.json")
    tok_file = tdir / "tokenizer_config.json"
    refuse_custom_code(config_dict, folder, trust_remote_code=trust_remote_code,
                       tokenizer_config=read_json(tok_file) if tok_file.is_file() else None)
    arch = for_model_type(config_dict.get("model_type"))
    files = weight_files(tdir)
    check_safetensors(files)
    if layout.pooling_error and pooling is None:
        raise UnsupportedModelError(layout.pooling_error)
    model, bidirectional = _load_model(tdir, arch, trust_remote_code=trust_remote_code)
    tokenizer = _load_tokenizer(tdir, trust_remote_code=trust_remote_code)
    check_tokenizer_fits(tokenizer, model, tdir)

    provenance = read_json(folder / PROVENANCE_FILE) if (folder / PROVENANCE_FILE).is_file() else None
    fallback = Pooling.MEAN if bidirectional else default_pooling(arch)  # bidirectional decoders: mean (ESE)
    chosen = Pooling(pooling) if pooling is not None else (layout.pooling or fallback)
    max_len = default_max_length(tokenizer, model.config, arch, declared=layout.max_seq_length)
    return Checkpoint(
        model=model,
        tokenizer=tokenizer,
        arch=arch,
        pooling=chosen,
        source=source,
        path=folder,
        post=[_load_post(kind, sub) for kind, sub in layout.post],
        max_seq_length=max_len,
        do_lower_case=layout.do_lower_case,
        provenance=provenance,
        weight_files=files,
        tokenizer_state=tokenizer_state(tokenizer),
        usage=layout.usage,
    )

