"""Exceptions of the cephalo module, one class per error kind of core/error.hpp.

Every class derives from CephaloError; ValidationError carries where the input broke a rule
(file, JSON path, the value found and what was expected), as the CLI prints it.
"""


class CephaloError(Exception):
    """Base of every error the libraries raise (C++ cephalo::Error)."""

    def __init__(self, message, **fields):
        super().__init__(message)
        self.message = message
        for key, value in fields.items():
            setattr(self, key, value)


class ValidationError(CephaloError, ValueError):
    """Input that breaks a rule of the schema (exit code 1 in the CLI)."""

    def __init__(self, message, file="", json_path="", value="", expected=""):
        super().__init__(message, file=file, json_path=json_path, value=value,
                         expected=expected)


class IoError(CephaloError, OSError):
    """A file that could not be read or written (exit code 5)."""


class NotFoundError(CephaloError, LookupError):
    """An unknown name (GPU, model, strategy); the message lists close names (exit code 1)."""


class InfeasibleError(CephaloError):
    """Valid input that cannot be satisfied, e.g. nothing fits in memory (exit code 3)."""


class RuntimeFailure(CephaloError, RuntimeError):
    """A failure of an external runtime (MPI, CUDA, NCCL) (exit code 4)."""


class CephaloWarning(UserWarning):
    """A note or warning the CLI prints on stderr beside its answer ("note: ..." or
    "warning: ..."), raised through the warnings module with the same text: a start-up cache
    entry that was there but ignored, a NIC bandwidth read as the node's total, a dtype priced
    on a slower pipeline, a stack calibration's notes, a plan replayed rank by rank, a measured
    run of another implementation."""
