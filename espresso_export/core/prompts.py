"""How sentence-transformers users call a model: its prompts and similarity function.

Read from ``config_sentence_transformers.json`` (and the Pooling config's ``include_prompt``), carried into every
folder espresso-export writes and into ``export.json``, and applied the way sentence-transformers applies them:
``encode`` puts the default prompt (if any) before each text, ``encode_query`` the ``query`` prompt and
``encode_document`` the ``document`` (or ``passage``, ``corpus``) prompt. Torch-free: the runtime reads it too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from espresso_export.core.errors import UnsupportedModelError, ValidationError

ROLE_PROMPTS = {"query": ("query",), "document": ("document", "passage", "corpus")}


@dataclass
class StUsage:
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    similarity_fn_name: str | None = None  # None: sentence-transformers' default, cosine
    include_prompt: bool = True  # False: the prompt's tokens are left out of the pooling

    @classmethod
    def from_config(cls, config: dict, *, include_prompt: bool = True, where: str = "the model") -> "StUsage":
        prompts = config.get("prompts") or {}
        if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
            raise ValidationError(f"{where}: prompts must map names to strings, got {prompts!r}")
        default = config.get("default_prompt_name")
        if default is not None and default not in prompts:
            raise ValidationError(f"{where}: default_prompt_name {default!r} is not one of its prompts "
                                  f"({', '.join(prompts) or 'none'})")
        return cls(prompts=dict(prompts), default_prompt_name=default,
                   similarity_fn_name=config.get("similarity_fn_name"), include_prompt=bool(include_prompt))

    @property
    def similarity(self) -> str:
        return self.similarity_fn_name or "cosine"

    def prompt(self, name: str | None = None, *, role: str | None = None) -> str:
        """The text put before each input: the named prompt; else the role's (``query`` / ``document``) if the
        model has one; else the default prompt; else none. A non-empty prompt on a model that leaves it out of
        its pooling (``include_prompt: false``) is refused: the pooling here cannot leave it out."""
        if name is not None:
            if name not in self.prompts:
                raise ValidationError(f"prompt {name!r} is not one of the model's prompts "
                                      f"({', '.join(self.prompts) or 'none'})")
            text = self.prompts[name]
        else:
            role_name = next((n for n in ROLE_PROMPTS.get(role or "", ()) if n in self.prompts), None)
            chosen = role_name or self.default_prompt_name
            text = self.prompts[chosen] if chosen is not None else ""
        if text and not self.include_prompt:
            raise UnsupportedModelError("this model leaves its prompt out of the pooling (include_prompt: false in "
                                        "its Pooling config), which espresso-export's pooling does not do")
        return text

    def to_config(self) -> dict:
        """The keys of ``config_sentence_transformers.json`` (and of ``export.json``) it stands for."""
        return {"prompts": self.prompts, "default_prompt_name": self.default_prompt_name,
                "similarity_fn_name": self.similarity}


__all__ = ["StUsage", "ROLE_PROMPTS"]
