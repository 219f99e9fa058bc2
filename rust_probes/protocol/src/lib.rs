//! The aliasfuzz probe protocol: serde types for every message, and the driver loop that both
//! probes share.
//!
//! A probe is a persistent process speaking JSON lines over stdin/stdout (see `PROTOCOL.md` beside
//! this crate and `schema/protocol.schema.json`). The driver owns everything that is not framework
//! specific: the handshake, parsing, unknown or malformed ops, ops whose names do not exist
//! (`skipped`), panics inside the framework (`error`), and the delta encoding of observations. A
//! probe implements [`Probe`] and [`Session`] and nothing else, so each probe stays a thin
//! interpreter of the IR onto its framework's API.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;
use strum::{IntoStaticStr, VariantNames};

pub mod transcript;
pub use transcript::Transcript;

/// Bumped on every incompatible change; the harness refuses a probe that reports another number.
pub const PROTOCOL_VERSION: u32 = 12;

/// The seed of a program's one generator ([`LazyInit::ProgramRng`]), set once when the program
/// opens.
pub const PROGRAM_SEED: u64 = 0;

/// Op names of the case format, version 1, in the order of [`Op`]'s variants (whose serde names
/// they are: strum and serde apply the same `snake_case` rule, checked by the unit test
/// `enum_names_are_the_schema_names`). A probe lists the subset it interprets in its hello.
pub const ALL_OPS: &[&str] = Op::VARIANTS;

/// Snapshot methods of the case format, version 1: the serde names of [`Method`]'s variants.
pub const ALL_METHODS: &[&str] = Method::VARIANTS;

// ---------------------------------------------------------------------------------------------
// Float encoding: JSON has no NaN or infinities, so non-finite values travel as strings.

fn ser_f32s<S: Serializer>(v: &Option<Vec<f32>>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        None => s.serialize_none(),
        Some(xs) => {
            use serde::ser::SerializeSeq;
            let mut seq = s.serialize_seq(Some(xs.len()))?;
            for x in xs {
                if x.is_finite() {
                    seq.serialize_element(x)?;
                } else if x.is_nan() {
                    seq.serialize_element("NaN")?;
                } else if *x > 0.0 {
                    seq.serialize_element("Infinity")?;
                } else {
                    seq.serialize_element("-Infinity")?;
                }
            }
            seq.end()
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum JsonF32 {
    Num(f32),
    Text(String),
}

fn de_f32s<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f32>, D::Error> {
    let raw: Vec<JsonF32> = Vec::deserialize(d)?;
    raw.into_iter()
        .map(|x| match x {
            JsonF32::Num(v) => Ok(v),
            JsonF32::Text(t) => match t.as_str() {
                "NaN" => Ok(f32::NAN),
                "Infinity" => Ok(f32::INFINITY),
                "-Infinity" => Ok(f32::NEG_INFINITY),
                other => Err(serde::de::Error::custom(format!("not a float: {other:?}"))),
            },
        })
        .collect()
}

fn de_opt_f32s<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<f32>>, D::Error> {
    #[derive(Deserialize)]
    struct Wrap(#[serde(deserialize_with = "de_f32s")] Vec<f32>);
    Ok(Option::<Wrap>::deserialize(d)?.map(|w| w.0))
}

// ---------------------------------------------------------------------------------------------
// Programs (the IR as the harness sends it; the TOML case file is the human form of the same).

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, IntoStaticStr, VariantNames)]
#[cfg_attr(test, derive(strum::EnumIter))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum TensorKind {
    /// Trainable: held by the framework's parameter container and updated by `step`.
    Param,
    /// Not trainable: a plain tensor (torch registered buffer).
    Buffer,
    /// A trainable parameter whose value is created on first read (burn's lazy init).
    Lazy,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, IntoStaticStr, VariantNames)]
#[cfg_attr(test, derive(strum::EnumIter))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum LazyInit {
    /// Every element is `fill`.
    Const,
    /// Uniform in [-1, 1) from the framework's own generator seeded with `seed`: values differ
    /// between frameworks, so the oracle compares verdicts, never values, of such tensors.
    Uniform,
    /// Uniform in [-1, 1) from the program's one generator, seeded with [`PROGRAM_SEED`] once
    /// when the program opens: a lazily initialised tensor's values depend on the order of first
    /// reads. Values differ between frameworks; the oracle compares them within one target only.
    ProgramRng,
}

impl Program {
    /// Whether any tensor draws from the program's one generator.
    pub fn uses_program_rng(&self) -> bool {
        self.tensors.iter().any(|t| t.init == Some(LazyInit::ProgramRng))
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TensorSpec {
    pub name: String,
    pub kind: TensorKind,
    pub shape: Vec<usize>,
    /// Row-major values (absent for lazy tensors).
    #[serde(default, deserialize_with = "de_opt_f32s", serialize_with = "ser_f32s")]
    pub value: Option<Vec<f32>>,
    /// The gradient used by `step` (params and lazy params); all ones when absent.
    #[serde(default, deserialize_with = "de_opt_f32s", serialize_with = "ser_f32s")]
    pub grad: Option<Vec<f32>>,
    #[serde(default)]
    pub init: Option<LazyInit>,
    #[serde(default)]
    pub fill: Option<f32>,
    #[serde(default)]
    pub seed: Option<u64>,
}

impl TensorSpec {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    /// The gradient `step` uses for this parameter: the `grad` field or all ones.
    pub fn grad_or_ones(&self) -> Vec<f32> {
        self.grad.clone().unwrap_or_else(|| vec![1.0; self.numel()])
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, IntoStaticStr, VariantNames)]
#[cfg_attr(test, derive(strum::EnumIter))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Method {
    Alias,
    Clone,
    Detach,
    Copy,
    Mul1,
    ToHome,
    ToCpu,
    Contiguous,
    Reshape,
    ViewRow,
    Transpose,
    StateDict,
    Deepcopy,
    ToHost,
    SaveLoad,
    Expand,
    Permute,
    Flip,
    Narrow,
    Unsqueeze,
    Squeeze,
    Chunk,
    Select,
    ToSameDtype,
    ViaBf16,
    ViaF32,
    Data,
}

impl Method {
    /// The method's case-format name (its serde name).
    pub fn as_str(&self) -> &'static str {
        self.into()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, IntoStaticStr, VariantNames)]
#[cfg_attr(test, derive(strum::EnumIter))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum OptimizerKind {
    Sgd,
    SgdMomentum,
    Adam,
    Adamw,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, IntoStaticStr, VariantNames)]
#[cfg_attr(test, derive(strum::EnumIter))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum DeviceRole {
    /// The device the target runs on.
    Home,
    /// The framework's CPU device (burn: flex).
    Cpu,
    /// A second device of the same framework (burn: the other CPU backend), where one exists.
    Alt,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, IntoStaticStr, VariantNames)]
#[cfg_attr(test, derive(strum::EnumIter))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum MoveMethod {
    To,
    Fork,
}

/// Where `save` keeps a checkpoint (the op table's `CHECKPOINT_STORES`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, IntoStaticStr, VariantNames)]
#[cfg_attr(test, derive(strum::EnumIter))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum CheckpointStore {
    /// What the framework returns, held in memory.
    Memory,
    /// A file written, and read back when loaded.
    File,
}

/// How `replace` puts a new value in a param's slot (the op table's `REPLACE_HOWS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, IntoStaticStr, VariantNames)]
#[cfg_attr(test, derive(strum::EnumIter))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ReplaceHow {
    /// A new parameter object over the value (torch `nn.Parameter`, candle `Var::from_tensor`,
    /// burn `Param::from_tensor`).
    New,
    /// The same parameter object holding the value (torch `p.data = v`, burn `Param::map`).
    Data,
    /// The parameter rebound to the value's storage (torch `p.set_(v)`).
    Set,
    /// The value's own parameter object in the slot: the two names are one tied parameter
    /// (torch `b.w = a.w`, candle one `Var` under two keys, burn one `Param` in two fields).
    Tie,
}

/// How `append` grows a tensor (the op table's `APPEND_HOWS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, IntoStaticStr, VariantNames)]
#[cfg_attr(test, derive(strum::EnumIter))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum AppendHow {
    /// The framework's concatenation: a new tensor.
    Cat,
    /// A preallocated buffer of [`CACHE_ROWS`] rows written in place, the name bound to its
    /// filled rows (a KV cache).
    Cache,
}

/// The element-wise function `map` applies (the op table's `MAP_FNS`): each exact in float32 on
/// the values programs hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, IntoStaticStr, VariantNames)]
#[cfg_attr(test, derive(strum::EnumIter))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum MapFn {
    Neg,
    Relu,
    /// Adds 1.
    AddScalar,
    /// Clamps to [-1, 1].
    Clamp,
}

/// The rows of an `append` cache's buffer, and the most rows an `append` grows a name to (the
/// op table's `CACHE_ROWS`): a cache never has to grow.
pub const CACHE_ROWS: usize = 16;

/// The hyper-parameters that key a live optimizer: `step` and `set_lr` name one by them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OptimizerSpec {
    pub optimizer: OptimizerKind,
    pub lr: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub betas: [f64; 2],
    pub eps: f64,
    pub weight_decay: f64,
}

impl OptimizerSpec {
    /// The key a probe files the live optimizer of these hyper-parameters under.
    pub fn key(&self) -> String {
        format!(
            "{:?}|{}|{}|{}|{:?}|{}|{}",
            self.optimizer, self.lr, self.momentum, self.dampening, self.betas, self.eps, self.weight_decay
        )
    }

    /// The same hyper-parameters with another learning rate.
    pub fn with_lr(&self, lr: f64) -> OptimizerSpec {
        OptimizerSpec { lr, ..*self }
    }
}

/// One op. The harness always sends every field (defaults already filled in).
#[derive(Clone, Debug, Serialize, Deserialize, IntoStaticStr, VariantNames)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
#[strum(serialize_all = "snake_case")]
pub enum Op {
    Snapshot {
        name: String,
        of: String,
        method: Method,
    },
    /// `index`: first-dimension index (row); `None` writes the whole tensor. `value` is row-major.
    Write {
        target: String,
        index: Option<usize>,
        #[serde(deserialize_with = "de_f32s")]
        value: Vec<f32>,
    },
    Fill {
        target: String,
        value: f32,
    },
    Scale {
        target: String,
        factor: f32,
    },
    Step {
        optimizer: OptimizerKind,
        lr: f64,
        momentum: f64,
        dampening: f64,
        betas: [f64; 2],
        eps: f64,
        weight_decay: f64,
    },
    /// One backward pass of the step's loss without a step: the gradients accumulate until the
    /// next `Step`, which adds its own pass and steps with the sum.
    Backward {},
    /// One backward pass of the sum of `of` through the graph that made it, the graph kept for
    /// another pass (torch `of.sum().backward(retain_graph=True)`): the gradients accumulate as
    /// for `Backward`, and the next `Step` adds its own pass and steps with the sum.
    BackwardOf {
        of: String,
    },
    /// Sets the learning rate of the live optimizer these fields key to `to`; it is keyed by
    /// lr `to` from then on.
    /// (The fields repeat `Step`'s: serde's `flatten` does not combine with `deny_unknown_fields`.)
    SetLr {
        optimizer: OptimizerKind,
        lr: f64,
        momentum: f64,
        dampening: f64,
        betas: [f64; 2],
        eps: f64,
        weight_decay: f64,
        to: f64,
    },
    Move {
        target: String,
        device: DeviceRole,
        method: MoveMethod,
    },
    /// A snapshot of the whole model: creates `<name>.<param>` for every param and lazy param.
    ModuleClone {
        name: String,
    },
    Valid {},
    Train {},
    NoGrad {},
    Freeze {},
    Read {
        target: String,
    },
    /// Copies `source` in place into row `index` of `target` (`source` shaped like the row), or
    /// into all of `target` when `index` is `None` (`source` shaped like `target`). With
    /// `source_index`, row `source_index` of `source` is what is copied (`dst[i] = src[j]`).
    Assign {
        target: String,
        source: String,
        index: Option<usize>,
        source_index: Option<usize>,
    },
    /// A checkpoint of the whole model named `name`: binds `<name>.<param>` to what it holds.
    Save {
        name: String,
        to: CheckpointStore,
    },
    /// Loads checkpoint `from` into the live model. A probe answers [`Outcome::Skipped`] when
    /// the `save` that took it did not run there.
    Load {
        from: String,
        assign: bool,
    },
    /// Puts `value` (shaped like `target`) in the model's slot of param `target`, `how` says how.
    Replace {
        target: String,
        value: String,
        how: ReplaceHow,
    },
    /// Binds `target` to a longer tensor: `target` with `source` appended along the first
    /// dimension (`source` shaped like a row of `target`, or like rows of it).
    Append {
        target: String,
        source: String,
        how: AppendHow,
    },
    /// Binds `name` to `layer`'s output on `input`. In training mode a batch norm updates its
    /// running statistics (`<layer>.running_mean`, `<layer>.running_var`).
    Forward {
        name: String,
        layer: String,
        input: String,
    },
    /// Binds `target` again to `func` of it, element-wise: a new tensor, computed from the old
    /// value moved into the call where the framework has value semantics.
    Map {
        target: String,
        #[serde(rename = "fn")]
        func: MapFn,
    },
    /// Binds `target` again to `target + other` (`other` shaped like it, or like a row of it,
    /// broadcast along the first dimension), as `Map` does.
    Add {
        target: String,
        other: String,
    },
}

impl Op {
    /// The optimizer a `step` or `set_lr` names.
    pub fn optimizer_spec(&self) -> Option<OptimizerSpec> {
        match *self {
            Op::Step {
                optimizer,
                lr,
                momentum,
                dampening,
                betas,
                eps,
                weight_decay,
            }
            | Op::SetLr {
                optimizer,
                lr,
                momentum,
                dampening,
                betas,
                eps,
                weight_decay,
                ..
            } => Some(OptimizerSpec {
                optimizer,
                lr,
                momentum,
                dampening,
                betas,
                eps,
                weight_decay,
            }),
            _ => None,
        }
    }

    /// Names this op needs to exist before it can run.
    pub fn uses(&self) -> Vec<&str> {
        match self {
            Op::Snapshot { of, .. } | Op::BackwardOf { of } => vec![of.as_str()],
            Op::Write { target, .. }
            | Op::Fill { target, .. }
            | Op::Scale { target, .. }
            | Op::Move { target, .. }
            | Op::Read { target }
            | Op::Map { target, .. } => vec![target.as_str()],
            Op::Add { target, other } => vec![target.as_str(), other.as_str()],
            Op::Assign { target, source, .. } => vec![target.as_str(), source.as_str()],
            Op::Replace { target, value, .. } => vec![target.as_str(), value.as_str()],
            Op::Append { target, source, .. } => vec![target.as_str(), source.as_str()],
            Op::Forward { input, .. } => vec![input.as_str()],
            _ => vec![],
        }
    }
}

/// What a layer is (the case format's `LAYER_KINDS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum LayerKind {
    /// Running mean and variance over `features` channels, updated with `momentum` in training.
    BatchNorm,
    /// Drops every element with probability `p` (0 or 1) in training; the identity otherwise.
    Dropout,
}

/// One declared layer of the model (`harness.case.layers`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerSpec {
    pub name: String,
    pub kind: LayerKind,
    #[serde(default)]
    pub features: Option<usize>,
    #[serde(default)]
    pub momentum: Option<f64>,
    #[serde(default)]
    pub p: Option<f64>,
}

/// The names of a batch-norm layer's running statistics, in binding order, and their initial
/// value (zeros and ones).
pub const RUNNING_STATS: [(&str, f32); 2] = [("running_mean", 0.0), ("running_var", 1.0)];

/// The epsilon every batch norm adds to the variance: each framework's default.
pub const BATCH_NORM_EPS: f64 = 1e-5;

impl LayerSpec {
    /// The names the layer binds (`<layer>.running_mean`, `<layer>.running_var`), or none.
    pub fn state_names(&self) -> Vec<String> {
        match self.kind {
            LayerKind::BatchNorm => RUNNING_STATS
                .iter()
                .map(|(s, _)| format!("{}.{s}", self.name))
                .collect(),
            LayerKind::Dropout => vec![],
        }
    }
}

/// The float dtype every tensor of a program is made in (its values, gradients, the model's
/// layers): one per program, because candle and burn refuse an op between two dtypes where
/// torch promotes, a design difference that would hide everything else a mixed program does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, IntoStaticStr, VariantNames)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Dtype {
    #[default]
    F32,
    F16,
    Bf16,
}

impl Dtype {
    /// The dtype's case-format name (`f32`, `f16`, `bf16`): what an observation's `dtype` says.
    pub fn as_str(&self) -> &'static str {
        self.into()
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Program {
    /// Absent in a float32 program.
    #[serde(default)]
    pub dtype: Dtype,
    pub tensors: Vec<TensorSpec>,
    /// The model's layers; absent in programs without any.
    #[serde(default)]
    pub layers: Vec<LayerSpec>,
    /// Kept raw so that one unknown or malformed op does not reject the whole program: the driver
    /// parses each op and reports `unsupported` or `error` for that op alone.
    pub ops: Vec<serde_json::Value>,
}

// ---------------------------------------------------------------------------------------------
// Observations and traces.

/// What one named tensor holds after an op, read to the host. On the wire it is an array of
/// its eight fields in this order (PROTOCOL.md, OBS): a trace holds dozens of observations, and
/// field names were most of their bytes and of the harness's decoding.
#[derive(Clone, Debug)]
pub struct Obs {
    pub shape: Vec<usize>,
    /// Row-major values; `None` when the tensor is not initialised (lazy) or could not be read.
    pub value: Option<Vec<f32>>,
    /// Framework identity: candle tensor id, burn ParamId, torch object id. Only the partition of
    /// names by equal tokens is meaningful, never the token itself.
    pub identity: Option<String>,
    pub device: String,
    pub requires_grad: Option<bool>,
    pub initialized: bool,
    /// The tensor's float dtype as the framework reports it (`f32`, `f16`, `bf16`, or the
    /// framework's own name for another); `value` holds its elements widened to float32.
    pub dtype: Option<String>,
    /// Why `value` is missing, when it is missing for a reason other than lazy init.
    pub note: Option<String>,
}

/// `Obs::value` in its wire form (`ser_f32s`).
struct WireValues<'a>(&'a Option<Vec<f32>>);

impl Serialize for WireValues<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ser_f32s(self.0, s)
    }
}

impl Serialize for Obs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let mut t = s.serialize_tuple(8)?;
        t.serialize_element(&self.shape)?;
        t.serialize_element(&WireValues(&self.value))?;
        t.serialize_element(&self.identity)?;
        t.serialize_element(&self.device)?;
        t.serialize_element(&self.requires_grad)?;
        t.serialize_element(&self.initialized)?;
        t.serialize_element(&self.dtype)?;
        t.serialize_element(&self.note)?;
        t.end()
    }
}

/// `Obs` read back from its wire array.
#[derive(Deserialize)]
struct WireObs(
    Vec<usize>,
    #[serde(deserialize_with = "de_opt_f32s")] Option<Vec<f32>>,
    Option<String>,
    String,
    Option<bool>,
    bool,
    Option<String>,
    Option<String>,
);

impl<'de> Deserialize<'de> for Obs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Obs, D::Error> {
        let WireObs(shape, value, identity, device, requires_grad, initialized, dtype, note) = WireObs::deserialize(d)?;
        Ok(Obs {
            shape,
            value,
            identity,
            device,
            requires_grad,
            initialized,
            dtype,
            note,
        })
    }
}

/// Equality for the delta encoding: values compare by bit pattern, so a tensor holding a NaN
/// is not reported as changed after every op (NaN != NaN under `f32`'s `PartialEq`).
impl PartialEq for Obs {
    fn eq(&self, other: &Obs) -> bool {
        let same_values = match (&self.value, &other.value) {
            (Some(a), Some(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
            (None, None) => true,
            _ => false,
        };
        same_values
            && self.shape == other.shape
            && self.device == other.device
            && self.requires_grad == other.requires_grad
            && self.identity == other.identity
            && self.initialized == other.initialized
            && self.dtype == other.dtype
            && self.note == other.note
    }
}

impl Obs {
    pub fn unreadable(note: String) -> Obs {
        Obs {
            shape: vec![],
            value: None,
            device: String::new(),
            requires_grad: None,
            identity: None,
            initialized: true,
            dtype: None,
            note: Some(note),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpStatus {
    Ok,
    Unsupported,
    Error,
    /// A name this op uses does not exist (an earlier op creating it was unsupported or failed).
    Skipped,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepRecord {
    pub status: OpStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Only the names whose observation differs from the previous step (new names included).
    pub changed: BTreeMap<String, Obs>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub name: String,
    /// The device `move` with `device = "alt"` goes to; `None` where there is none.
    pub alt: Option<String>,
    /// `cpu` or `gpu`: informational.
    pub kind: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Hello {
    pub protocol: u32,
    pub framework: String,
    pub versions: BTreeMap<String, String>,
    pub devices: Vec<DeviceInfo>,
    pub ops: Vec<String>,
    pub methods: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Trace {
    pub id: u64,
    pub device: String,
    /// `ok`; `unsupported` when the framework cannot run the program on that device at all (a
    /// [`Refusal::Unsupported`]); `error` when its tensors could not be created.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub initial: BTreeMap<String, Obs>,
    pub steps: Vec<StepRecord>,
    pub elapsed_us: u64,
    /// The calls the session made (asked for by the request's `transcript`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    Hello {
        protocol: u32,
    },
    Run {
        id: u64,
        device: String,
        program: Program,
        /// Whether the trace carries the session's transcript (`PROTOCOL.md`).
        #[serde(default)]
        transcript: bool,
    },
    Exit {},
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reply {
    Hello(Hello),
    Trace(Trace),
    Error { id: Option<u64>, message: String },
}

// ---------------------------------------------------------------------------------------------
// What a probe implements.

/// Result of applying one op.
pub enum Outcome {
    Ok,
    Unsupported(String),
    Error(String),
    /// Something the op needs was never made here (a checkpoint whose `save` did not run).
    Skipped(String),
}

/// One program being interpreted on one device.
pub trait Session {
    fn apply(&mut self, op: &Op) -> Outcome;
    /// Names currently bound, in creation order.
    fn names(&self) -> Vec<String>;
    /// Reads one name to the host. Must not force a lazy parameter's initialisation.
    fn observe(&mut self, name: &str) -> Obs;
    /// Called before each op: the transcript's lines from here on are that op's.
    fn begin_op(&mut self) {}
    /// The calls the session made (`Transcript::to_json`), where it keeps a transcript.
    fn transcript(&self) -> Option<serde_json::Value> {
        None
    }
}

/// Why a program could not be opened on a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The framework has no call for something the program declares (the trace's status is
    /// `unsupported`, which the oracle leaves out of its comparisons).
    Unsupported(String),
    /// The device or a tensor could not be made (status `error`).
    Error(String),
}

impl From<String> for Refusal {
    fn from(message: String) -> Refusal {
        Refusal::Error(message)
    }
}

pub trait Probe {
    type S: Session;
    fn hello(&self) -> Hello;
    /// Creates the program's tensors on `device`.
    fn open(&mut self, device: &str, program: &Program) -> Result<Self::S, Refusal>;
}

/// The message of a caught panic (`panic: <text>`), for an error outcome or observation note.
pub fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        format!("panic: {s}")
    } else if let Some(s) = p.downcast_ref::<String>() {
        format!("panic: {s}")
    } else {
        "panic".to_string()
    }
}

fn observe_all<S: Session>(session: &mut S) -> BTreeMap<String, Obs> {
    let mut out = BTreeMap::new();
    for name in session.names() {
        let obs = catch_unwind(AssertUnwindSafe(|| session.observe(&name)))
            .unwrap_or_else(|p| Obs::unreadable(panic_message(p)));
        out.insert(name, obs);
    }
    out
}

/// Interprets one program: the part of the protocol that is the same for every framework.
/// With `transcript`, an `ok` trace carries the session's transcript, where it keeps one.
pub fn run_program<P: Probe>(probe: &mut P, id: u64, device: &str, program: &Program, transcript: bool) -> Trace {
    let start = Instant::now();
    let opened = catch_unwind(AssertUnwindSafe(|| probe.open(device, program)))
        .unwrap_or_else(|p| Err(Refusal::Error(panic_message(p))));
    let mut session = match opened {
        Ok(s) => s,
        Err(refusal) => {
            let (status, message) = match refusal {
                Refusal::Unsupported(m) => ("unsupported", m),
                Refusal::Error(m) => ("error", m),
            };
            return Trace {
                id,
                device: device.to_string(),
                status: status.into(),
                message: Some(message),
                initial: BTreeMap::new(),
                steps: vec![],
                elapsed_us: start.elapsed().as_micros() as u64,
                transcript: None,
            };
        }
    };
    let initial = observe_all(&mut session);
    let mut previous = initial.clone();
    let mut steps = Vec::with_capacity(program.ops.len());
    for raw in &program.ops {
        session.begin_op();
        let (status, message) = match raw.get("op").and_then(|v| v.as_str()) {
            None => (OpStatus::Error, Some("malformed op: no string field `op`".to_string())),
            Some(name) if !ALL_OPS.contains(&name) => (OpStatus::Unsupported, Some(format!("unknown op {name:?}"))),
            Some(_) => match serde_json::from_value::<Op>(raw.clone()) {
                Err(e) => (OpStatus::Error, Some(format!("malformed op: {e}"))),
                Ok(op) => {
                    let names = session.names();
                    let missing: Vec<&str> = op
                        .uses()
                        .into_iter()
                        .filter(|n| !names.iter().any(|m| m == n))
                        .collect();
                    if !missing.is_empty() {
                        (
                            OpStatus::Skipped,
                            Some(format!("no tensor named {}", missing.join(", "))),
                        )
                    } else {
                        match catch_unwind(AssertUnwindSafe(|| session.apply(&op))) {
                            Ok(Outcome::Ok) => (OpStatus::Ok, None),
                            Ok(Outcome::Unsupported(m)) => (OpStatus::Unsupported, Some(m)),
                            Ok(Outcome::Error(m)) => (OpStatus::Error, Some(m)),
                            Ok(Outcome::Skipped(m)) => (OpStatus::Skipped, Some(m)),
                            Err(p) => (OpStatus::Error, Some(panic_message(p))),
                        }
                    }
                }
            },
        };
        let now = observe_all(&mut session);
        let changed = now
            .iter()
            .filter(|(k, v)| previous.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        previous = now;
        steps.push(StepRecord {
            status,
            message,
            changed,
        });
    }
    Trace {
        id,
        device: device.to_string(),
        status: "ok".into(),
        message: None,
        initial,
        steps,
        elapsed_us: start.elapsed().as_micros() as u64,
        transcript: if transcript { session.transcript() } else { None },
    }
}

fn write_reply(out: &mut impl Write, reply: &Reply) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, reply)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// Serves the protocol on stdin/stdout until `exit` or end of input. Never panics on bad input:
/// a line that is not a valid request gets an `error` reply and the probe reads the next line.
pub fn serve<P: Probe>(mut probe: P) {
    // Panics are caught and reported in the trace; the default hook would also print them to
    // stderr, which the harness drains but users do not need to see for every planted error.
    std::panic::set_hook(Box::new(|_| {}));
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let reply = match serde_json::from_str::<Request>(&line) {
            Err(e) => Reply::Error {
                id: None,
                message: format!("malformed request: {e}"),
            },
            Ok(Request::Exit {}) => break,
            Ok(Request::Hello { protocol }) => {
                let mut hello = probe.hello();
                if protocol != PROTOCOL_VERSION {
                    // Still answer with our own version so the harness can name both numbers.
                    hello.protocol = PROTOCOL_VERSION;
                }
                Reply::Hello(hello)
            }
            Ok(Request::Run {
                id,
                device,
                program,
                transcript,
            }) => Reply::Trace(run_program(&mut probe, id, &device, &program, transcript)),
        };
        if write_reply(&mut out, &reply).is_err() {
            break; // the harness went away
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(value: Vec<f32>) -> Obs {
        Obs {
            shape: vec![value.len()],
            value: Some(value),
            device: "cpu".into(),
            requires_grad: Some(true),
            identity: None,
            initialized: true,
            dtype: Some("f32".into()),
            note: None,
        }
    }

    #[test]
    fn nan_holding_observations_are_equal_to_themselves() {
        assert_eq!(obs(vec![1.0, f32::NAN]), obs(vec![1.0, f32::NAN]));
        assert_ne!(obs(vec![1.0, f32::NAN]), obs(vec![1.0, 2.0]));
        assert_ne!(obs(vec![0.0]), obs(vec![-0.0]));
    }

    #[test]
    fn an_observation_of_another_dtype_is_a_change() {
        let bf16 = Obs {
            dtype: Some("bf16".into()),
            ..obs(vec![1.0])
        };
        assert_ne!(obs(vec![1.0]), bf16);
    }

    #[test]
    fn a_program_without_dtype_is_float32_and_one_with_it_reads_it() {
        let p: Program = serde_json::from_str(r#"{"tensors": [], "ops": []}"#).unwrap();
        assert_eq!(p.dtype, Dtype::F32);
        let p: Program = serde_json::from_str(r#"{"dtype": "bf16", "tensors": [], "ops": []}"#).unwrap();
        assert_eq!((p.dtype, p.dtype.as_str()), (Dtype::Bf16, "bf16"));
        assert!(serde_json::from_str::<Program>(r#"{"dtype": "f64", "tensors": [], "ops": []}"#).is_err());
    }

    #[test]
    fn non_finite_floats_round_trip_as_strings() {
        let text = serde_json::to_string(&obs(vec![f32::INFINITY, f32::NAN, -1.5])).unwrap();
        assert!(text.contains(r#"["Infinity","NaN",-1.5]"#), "{text}");
        let back: Obs = serde_json::from_str(&text).unwrap();
        assert_eq!(back, obs(vec![f32::INFINITY, f32::NAN, -1.5]));
    }

    #[test]
    fn an_observation_travels_as_its_eight_fields_in_order() {
        let o = Obs {
            identity: Some("t7".into()),
            note: Some("why".into()),
            ..obs(vec![0.5])
        };
        let text = serde_json::to_string(&o).unwrap();
        assert_eq!(text, r#"[[1],[0.5],"t7","cpu",true,true,"f32","why"]"#);
        assert_eq!(serde_json::from_str::<Obs>(&text).unwrap(), o);
        let unread = serde_json::to_string(&Obs::unreadable("gone".into())).unwrap();
        assert_eq!(unread, r#"[[],null,null,"",null,true,null,"gone"]"#);
    }

    #[test]
    fn unknown_and_malformed_ops_do_not_reject_the_program() {
        let program: Program = serde_json::from_str(
            r#"{"tensors":[{"name":"w","kind":"param","shape":[1],"value":[1.0]}],
                "ops":[{"op":"explode"},{"op":"snapshot","name":"s"}]}"#,
        )
        .unwrap();
        assert_eq!(program.ops.len(), 2);
        assert!(serde_json::from_value::<Op>(program.ops[1].clone()).is_err());
    }

    /// The `$defs.<key>.enum` list of the JSON schema.
    fn schema_names(key: &str) -> Vec<String> {
        let schema: serde_json::Value = serde_json::from_str(include_str!("../schema/protocol.schema.json")).unwrap();
        let names = schema["$defs"][key]["enum"].as_array();
        let names = names.unwrap_or_else(|| panic!("schema: no $defs.{key}.enum"));
        names.iter().map(|n| n.as_str().unwrap().to_string()).collect()
    }

    /// A unit enum's serde names (each variant serialized with serde_json) are its derived
    /// strum names (`VariantNames`, `IntoStaticStr`) and the schema's `$defs.<key>.enum`, in order.
    fn check_unit_enum<E>(key: &str)
    where
        E: strum::IntoEnumIterator + VariantNames + Serialize + Copy + std::fmt::Debug,
        &'static str: From<E>,
    {
        let serde_names: Vec<String> = E::iter()
            .map(|v| {
                let name = serde_json::to_value(v).unwrap();
                assert_eq!(name, <&str>::from(v), "{v:?}: serde and strum names differ");
                name.as_str().unwrap().to_string()
            })
            .collect();
        assert_eq!(serde_names, E::VARIANTS, "{key}: VariantNames");
        assert_eq!(serde_names, schema_names(key), "{key}: the schema's names");
    }

    #[test]
    fn enum_names_are_the_schema_names() {
        check_unit_enum::<Method>("method");
        check_unit_enum::<OptimizerKind>("optimizer");
        check_unit_enum::<DeviceRole>("device_role");
        check_unit_enum::<MoveMethod>("move_method");
        check_unit_enum::<CheckpointStore>("checkpoint_store");
        check_unit_enum::<ReplaceHow>("replace_how");
        check_unit_enum::<AppendHow>("append_how");
        check_unit_enum::<MapFn>("map_fn");
        check_unit_enum::<TensorKind>("tensor_kind");
        check_unit_enum::<LazyInit>("lazy_init");
        for m in <Method as strum::IntoEnumIterator>::iter() {
            assert_eq!(serde_json::to_value(m).unwrap(), m.as_str());
        }
        // Op carries data: one value of every variant, in declaration order, and its tag.
        let t = || "w".to_string();
        let ops = [
            Op::Snapshot {
                name: "s".into(),
                of: t(),
                method: Method::Alias,
            },
            Op::Write {
                target: t(),
                index: None,
                value: vec![1.0],
            },
            Op::Fill {
                target: t(),
                value: 0.0,
            },
            Op::Scale {
                target: t(),
                factor: 2.0,
            },
            Op::Step {
                optimizer: OptimizerKind::Sgd,
                lr: 0.1,
                momentum: 0.0,
                dampening: 0.0,
                betas: [0.9, 0.999],
                eps: 1e-8,
                weight_decay: 0.0,
            },
            Op::Backward {},
            Op::BackwardOf { of: t() },
            Op::SetLr {
                optimizer: OptimizerKind::Sgd,
                lr: 0.1,
                momentum: 0.0,
                dampening: 0.0,
                betas: [0.9, 0.999],
                eps: 1e-8,
                weight_decay: 0.0,
                to: 0.5,
            },
            Op::Move {
                target: t(),
                device: DeviceRole::Cpu,
                method: MoveMethod::To,
            },
            Op::ModuleClone { name: "m".into() },
            Op::Valid {},
            Op::Train {},
            Op::NoGrad {},
            Op::Freeze {},
            Op::Read { target: t() },
            Op::Assign {
                target: t(),
                source: "s".into(),
                index: None,
                source_index: Some(0),
            },
            Op::Save {
                name: "c".into(),
                to: CheckpointStore::Memory,
            },
            Op::Load {
                from: "c".into(),
                assign: false,
            },
            Op::Replace {
                target: t(),
                value: "s".into(),
                how: ReplaceHow::New,
            },
            Op::Append {
                target: t(),
                source: "s".into(),
                how: AppendHow::Cat,
            },
            Op::Forward {
                name: "y".into(),
                layer: "bn".into(),
                input: t(),
            },
            Op::Map {
                target: t(),
                func: MapFn::Relu,
            },
            Op::Add {
                target: t(),
                other: "s".into(),
            },
        ];
        let tags: Vec<String> = ops
            .iter()
            .map(|op| {
                let tag = serde_json::to_value(op).unwrap()["op"].clone();
                assert_eq!(tag, <&str>::from(op), "{op:?}: serde and strum names differ");
                tag.as_str().unwrap().to_string()
            })
            .collect();
        assert_eq!(tags, ALL_OPS, "one sample per Op variant, in order");
        assert_eq!(tags, schema_names("op_name"));
    }
}
