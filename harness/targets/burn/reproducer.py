"""The burn reproducer of a case: the burn probe's transcript of it (the calls the probe made,
each spelled once through ``call!`` in ``rust_probes/burn_probe/src/session.rs``), wrapped in a
``main`` by ``harness/targets/rust_reproducer.py``. This module holds only what surrounds the
transcript: the ``use`` lines, the ``Model`` the case's params and layers live in, the print
helper, and the set-up a program may not read."""

from __future__ import annotations

from harness.case.ir import Program
from harness.targets.reproducer_base import Check
from harness.targets.rust_reproducer import Scaffold, rust_main

SCAFFOLD = Scaffold(
    framework="burn",
    probe="burn_probe",
    device="flex",
    uses=(
        "use burn::module::{Module, ModuleMapper, Param, ParamId, RunningState};",
        "use burn::nn::{BatchNorm, BatchNormConfig, Dropout, DropoutConfig, Initializer};",
        "use burn::optim::decay::WeightDecayConfig;",
        "use burn::optim::momentum::MomentumConfig;",
        "use burn::optim::{AdamConfig, AdamWConfig, GradientsAccumulator, GradientsParams, Optimizer, SgdConfig};",
        "use burn::tensor::{DType, Device, Distribution, FloatDType, Shape, Tensor, TensorData};",
    ),
    helpers=(
        "/// The program's model: its params by rank, in program order within each rank, and its layers",
        "/// by kind. Buffers stay outside it (a plain `Tensor` field is a module constant, which burn",
        "/// neither records nor trains).",
        "#[derive(Module, Debug, Default)]",
        "struct Model {",
        "    p1: Vec<Param<Tensor<1>>>,",
        "    p2: Vec<Param<Tensor<2>>>,",
        "    p3: Vec<Param<Tensor<3>>>,",
        "    bn: Vec<BatchNorm>,",
        "    dropout: Vec<Dropout>,",
        "}",
        "",
        "/// What `show` reads: a tensor's values, row-major, read to the host; `None` for a lazy param",
        "/// not yet initialised (reading it would initialise it).",
        "trait Shown {",
        "    fn read(&self) -> Option<Result<Vec<f32>, String>>;",
        "}",
        "",
        "impl<const D: usize> Shown for Tensor<D> {",
        "    fn read(&self) -> Option<Result<Vec<f32>, String>> {",
        '        Some(self.to_data().try_to_vec_as::<f32>().map_err(|e| format!("to_data: {e:?}")))',
        "    }",
        "}",
        "",
        "impl<const D: usize> Shown for Param<Tensor<D>> {",
        "    fn read(&self) -> Option<Result<Vec<f32>, String>> {",
        "        if self.is_initialized() { self.val().read() } else { None }",
        "    }",
        "}",
        "",
        "impl Shown for RunningState<Tensor<1>> {",
        "    fn read(&self) -> Option<Result<Vec<f32>, String>> {",
        "        self.value().read()",
        "    }",
        "}",
        "",
        "/// A name whose value a failed call consumed (moved into it): nothing is left to read.",
        "struct Lost;",
        "",
        "impl Shown for Lost {",
        "    fn read(&self) -> Option<Result<Vec<f32>, String>> {",
        '        Some(Err("consumed by a call that failed".into()))',
        "    }",
        "}",
        "",
        "impl<T: Shown> Shown for &T {",
        "    fn read(&self) -> Option<Result<Vec<f32>, String>> {",
        "        (*self).read()",
        "    }",
        "}",
        "",
        "/// The values a check compares (none for an uninitialised lazy param: a check never forces one).",
        "fn values(t: &impl Shown) -> Vec<f32> {",
        "    t.read().and_then(Result::ok).unwrap_or_default()",
        "}",
        "",
        "/// Prints `label: name = [values]`.",
        "fn show(label: &str, name: &str, t: &impl Shown) {",
        "    match t.read() {",
        '        None => println!("{label}: {name} = uninitialized"),',
        '        Some(Ok(v)) => println!("{label}: {name} = {v:?}"),',
        '        Some(Err(e)) => println!("{label}: {name} = unreadable ({e})"),',
        "    }",
        "}",
    ),
    result="Result<(), Box<dyn std::error::Error>>",
    errors="panic",
    # The model is read only by programs with params or layers; the dtype only by conversions.
    set_up=(("model", r"let mut model = "), ("dtype", r"let dtype = ")),
    unread_lets=r"let (?P<var>\w+_grad\d*) = ",
)


def burn_main(program: Program, repro: dict | None = None, check: Check | None = None) -> str:
    """``src/main.rs`` of ``program``'s burn reproducer (``repro`` is not read: the transcript is
    the probe's own run of the case on the CPU); ``check``: what says whether the finding's
    divergence shows (exit 1 when it does)."""
    return rust_main(SCAFFOLD, program, check)
