"""Warnings that fairseq 0.12 triggers on every command with today's hydra and
torch, about fairseq's own code, which a user can do nothing about: hidden so
that the warnings that matter stand out. Each filter matches one message (and,
where it names it, the module that emits it); nothing else is hidden.
"""
import logging
import warnings

# (message regex, category, emitting module regex or "" for any)
KNOWN_WARNINGS = [
    # fairseq's config conversion (convert_namespace_to_omegaconf) uses hydra's
    # pre-1.1 API: five deprecation notices per command.
    (r"hydra\.experimental\.(initialize|compose)\(\) is no longer experimental", UserWarning, r"hydra\."),
    (r"\s*The version_base parameter is not specified", UserWarning, r"hydra\."),
    (r"In 'config': Usage of deprecated keyword in package header", UserWarning, r"hydra\."),
    (r"\s*'config' is validated against ConfigStore schema with the same name", UserWarning, ""),
    (r"\s*The strict flag in the compose API is deprecated", UserWarning, r"hydra\."),
    # fairseq's data loaders always ask for pinned memory, also with --cpu.
    (r"'pin_memory' argument is set as true but no accelerator is found", UserWarning, r"torch\.utils\.data\."),
    # fairseq's train step wraps every update in the deprecated torch.cuda.amp.autocast.
    (r"`torch\.cuda\.amp\.autocast\(args\.\.\.\)` is deprecated", FutureWarning, r"fairseq\."),
    # fairseq's MultiheadAttention passes a float attn_mask with a bool key_padding_mask.
    (r"Support for mismatched key_padding_mask and attn_mask is deprecated", UserWarning, r"torch\.nn\.functional"),
]


def hide_known_warnings() -> None:
    for message, category, module in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
    # hydra logs "Setting JobRuntime:name=..." at DEBUG level on fairseq-generate.
    logging.getLogger("hydra").setLevel(logging.INFO)
