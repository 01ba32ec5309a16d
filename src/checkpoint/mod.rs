//! Checkpoints: a training run as one safetensors file, the same bytes on every
//! target, so a run saved in the browser resumes natively and PyTorch reads it.
//!
//! - Tensors (f32, little-endian): every parameter under its nanoGPT name with its
//!   PyTorch shape (`nn.Linear` weights `[out, in]`), and the AdamW moments as
//!   `optimizer.m.<name>` and `optimizer.v.<name>`. The output head is tied to
//!   `transformer.wte.weight` and not stored: loaders tie it, as nanoGPT does.
//! - Metadata (strings): the format version, the step, both configs as JSON, the
//!   batcher's and the sampler's random states, the dropout seed and the vocabulary.
//!   The keys are in [`keys`]; docs/checkpoint.md describes the whole format.
//!
//! Resuming restores everything a step depends on (parameters, moments, step
//! counter and so the schedule and the dropout masks, the batch stream), so a
//! resumed run is bit-identical to one that never stopped. Loading checks the whole
//! file on the host before anything reaches the GPU and builds a new trainer: a bad
//! file leaves every running trainer as it was.

use std::collections::HashMap;

use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensorError, SafeTensors};

use crate::config::TrainConfig;
use crate::data::{Corpus, Tokenizer};
use crate::error::{Error, Result};
use crate::gpu::ContextOptions;
use crate::kernels::{Moments, ParamArena};
use crate::model::{self, GptConfig, GpuBatch, GpuOps, HeldBatch};
use crate::rng::Rng;
use crate::train::{Batcher, StepStats, Trainer};

#[cfg(not(target_arch = "wasm32"))]
mod file;
#[cfg(not(target_arch = "wasm32"))]
pub use file::{read_file, write_file};

/// The version this build writes and reads (`tidepool.format`).
pub const FORMAT_VERSION: &str = "1";

/// The largest checkpoint file tidepool reads: 1 GiB, about 89 million parameters
/// with their two AdamW moments (the shakespeare preset's is 123 MiB). The whole
/// file is held in memory (wasm32 has 4 GiB in all), so this is checked before a file
/// is read.
pub const MAX_CHECKPOINT_BYTES: u64 = 1 << 30;

/// Metadata keys.
pub mod keys {
    /// `"1"`: [`super::FORMAT_VERSION`].
    pub const FORMAT: &str = "tidepool.format";
    /// Training steps done (decimal).
    pub const STEP: &str = "tidepool.step";
    /// [`crate::train::TrainConfig`] as JSON.
    pub const TRAIN_CONFIG: &str = "tidepool.train_config";
    /// [`crate::model::GptConfig`] as JSON.
    pub const MODEL_CONFIG: &str = "tidepool.model_config";
    /// State of the training batches' random generator (decimal u64).
    pub const BATCHER_STATE: &str = "tidepool.batcher_state";
    /// State of the sampler's random generator (decimal u64).
    pub const SAMPLE_STATE: &str = "tidepool.sample_state";
    /// Seed of the dropout masks (decimal u64; the run's seed).
    pub const DROPOUT_SEED: &str = "tidepool.dropout_seed";
    /// The tokenizer: a JSON array of one-character strings, in id order.
    pub const VOCAB: &str = "tidepool.vocab";
    /// safetensors' own convention for PyTorch tensors (`"pt"`), which Hugging
    /// Face loaders check.
    pub const TORCH_FORMAT: &str = "format";
}

/// Prefixes of the AdamW moments' tensor names.
pub const ADAM_M_PREFIX: &str = "optimizer.m.";
pub const ADAM_V_PREFIX: &str = "optimizer.v.";

/// A training run on the host: what [`Trainer::save`] writes and
/// [`Trainer::resume`] reads. Tensors are in [`GptConfig::params`] order.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    pub step: u32,
    pub train: TrainConfig,
    pub model: GptConfig,
    pub batcher_state: u64,
    pub sample_state: u64,
    /// The tokenizer's characters in id order (sorted, distinct).
    pub vocab: Vec<char>,
    pub params: Vec<Vec<f32>>,
    pub adam_m: Vec<Vec<f32>>,
    pub adam_v: Vec<Vec<f32>>,
}

/// PyTorch shape of the parameter `name` of `model` (nanoGPT's GPT-2 layout).
pub fn shape(model: &GptConfig, name: &str) -> Vec<usize> {
    let (v, t, c) = (model.vocab, model.context, model.width);
    let suffix = name.rsplit_once(".h.").map_or(name, |(_, rest)| rest);
    match suffix {
        "transformer.wte.weight" => vec![v, c],
        "transformer.wpe.weight" => vec![t, c],
        _ if suffix.ends_with("attn.c_attn.weight") => vec![3 * c, c],
        _ if suffix.ends_with("attn.c_attn.bias") => vec![3 * c],
        _ if suffix.ends_with("attn.c_proj.weight") => vec![c, c],
        _ if suffix.ends_with("mlp.c_fc.weight") => vec![4 * c, c],
        _ if suffix.ends_with("mlp.c_fc.bias") => vec![4 * c],
        _ if suffix.ends_with("mlp.c_proj.weight") => vec![c, 4 * c],
        // layernorm gains and biases, projection biases
        _ => vec![c],
    }
}

/// Parameters of `model` counted in u64 with checked arithmetic: a config read from
/// a file may be hostile, and wasm32's usize is 32 bits.
fn param_count(model: &GptConfig) -> Option<u64> {
    let (v, t, c, l) = (
        model.vocab as u64,
        model.context as u64,
        model.width as u64,
        model.layers as u64,
    );
    // per layer: 12 c^2 weights and 13 c biases and gains
    let layer = c
        .checked_mul(c)?
        .checked_mul(12)?
        .checked_add(c.checked_mul(13)?)?;
    v.checked_add(t)?
        .checked_mul(c)?
        .checked_add(layer.checked_mul(l)?)?
        .checked_add(c.checked_mul(2)?)
}

/// An error naming the limit, the value and how to stay under it, for a file of
/// `bytes` bytes.
pub fn check_file_size(bytes: u64) -> Result<()> {
    if bytes > MAX_CHECKPOINT_BYTES {
        return Err(Error::TooLarge(format!(
            "the checkpoint is {} ({bytes} bytes); tidepool reads checkpoints of at most {} \
             (checkpoint::MAX_CHECKPOINT_BYTES)",
            crate::fmt_bytes(bytes),
            crate::fmt_bytes(MAX_CHECKPOINT_BYTES)
        )));
    }
    Ok(())
}

fn bad(message: String) -> Error {
    Error::Checkpoint(format!("bad checkpoint: {message}"))
}

fn not_safetensors(e: SafeTensorError) -> Error {
    use SafeTensorError::*;
    let why = match &e {
        HeaderTooSmall | InvalidHeaderLength | MetadataIncompleteBuffer => {
            "it ends early or its header is damaged: was it truncated?"
        }
        InvalidHeader(_) | InvalidHeaderDeserialization(_) | HeaderTooLarge => {
            "its header is not a safetensors header: is it a checkpoint at all?"
        }
        _ => "its tensor table is inconsistent",
    };
    bad(format!("not a complete safetensors file ({e}); {why}"))
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|x| x.to_le_bytes()).collect()
}

impl Checkpoint {
    /// The safetensors bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let specs = self.model.params();
        let groups = [
            ("", &self.params),
            (ADAM_M_PREFIX, &self.adam_m),
            (ADAM_V_PREFIX, &self.adam_v),
        ];
        let mut data = Vec::with_capacity(3 * specs.len());
        for (prefix, tensors) in groups {
            if tensors.len() != specs.len() {
                return Err(Error::Config(format!(
                    "a checkpoint of this model holds {} tensors in each group, got {}",
                    specs.len(),
                    tensors.len()
                )));
            }
            for (spec, values) in specs.iter().zip(tensors.iter()) {
                if values.len() != spec.len {
                    return Err(Error::Config(format!(
                        "{prefix}{} has {} values, the model needs {}",
                        spec.name,
                        values.len(),
                        spec.len
                    )));
                }
                data.push((
                    format!("{prefix}{}", spec.name),
                    shape(&self.model, &spec.name),
                    f32_bytes(values),
                ));
            }
        }
        let views = data
            .iter()
            .map(|(name, shape, bytes)| {
                let view = TensorView::new(Dtype::F32, shape.clone(), bytes)
                    .map_err(|e| Error::Config(format!("tensor {name}: {e}")))?;
                Ok((name.as_str(), view))
            })
            .collect::<Result<Vec<_>>>()?;
        let metadata: HashMap<String, String> = [
            (keys::FORMAT, FORMAT_VERSION.to_string()),
            (keys::TORCH_FORMAT, "pt".to_string()),
            (keys::STEP, self.step.to_string()),
            (keys::TRAIN_CONFIG, json(&self.train)),
            (keys::MODEL_CONFIG, json(&self.model)),
            (keys::BATCHER_STATE, self.batcher_state.to_string()),
            (keys::SAMPLE_STATE, self.sample_state.to_string()),
            (keys::DROPOUT_SEED, self.train.seed.to_string()),
            (keys::VOCAB, json(&self.vocab)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        safetensors::serialize(views, Some(metadata))
            .map_err(|e| Error::Config(format!("could not write the checkpoint: {e}")))
    }

    /// Reads and checks a checkpoint: format, version, configs, vocabulary, every
    /// tensor's name, type and shape, and sizes (in u64, before anything is
    /// allocated from the file's figures).
    pub fn from_bytes(bytes: &[u8]) -> Result<Checkpoint> {
        check_file_size(bytes.len() as u64)?;
        let (_, header) = SafeTensors::read_metadata(bytes).map_err(not_safetensors)?;
        let tensors = SafeTensors::deserialize(bytes).map_err(not_safetensors)?;
        let empty = HashMap::new();
        let meta = header.metadata().as_ref().unwrap_or(&empty);
        let get = |key: &str| {
            meta.get(key)
                .ok_or_else(|| bad(format!("its metadata has no {key}")))
        };
        let version = meta.get(keys::FORMAT).ok_or_else(|| {
            bad(format!(
                "a safetensors file without {} in its metadata: not a tidepool checkpoint",
                keys::FORMAT
            ))
        })?;
        if version != FORMAT_VERSION {
            return Err(bad(format!(
                "format version {version:?}; this build of tidepool reads version \
                 {FORMAT_VERSION:?} (was it written by another version?)"
            )));
        }
        let number = |key: &str| -> Result<u64> {
            let text = get(key)?;
            text.parse()
                .map_err(|_| bad(format!("{key} is {text:?}, not a whole number")))
        };
        // A run at the counter's limit loads (to sample, or to save again); its next
        // step is refused (train::MAX_STEP) rather than wrapped to step 0.
        let step = number(keys::STEP)?;
        let step = u32::try_from(step).map_err(|_| {
            bad(format!(
                "{} is {step}; the step counter stops at {} (train::MAX_STEP)",
                keys::STEP,
                crate::train::MAX_STEP
            ))
        })?;
        let train: TrainConfig = serde_json::from_str(get(keys::TRAIN_CONFIG)?)
            .map_err(|e| bad(format!("{}: {e}", keys::TRAIN_CONFIG)))?;
        let model: GptConfig = serde_json::from_str(get(keys::MODEL_CONFIG)?)
            .map_err(|e| bad(format!("{}: {e}", keys::MODEL_CONFIG)))?;
        let vocab: Vec<String> = serde_json::from_str(get(keys::VOCAB)?)
            .map_err(|e| bad(format!("{}: {e}", keys::VOCAB)))?;
        let vocab = vocab
            .iter()
            .map(|s| {
                let mut chars = s.chars();
                match (chars.next(), chars.next()) {
                    (Some(c), None) => Ok(c),
                    _ => Err(bad(format!(
                        "{} holds {s:?}; every entry must be one character",
                        keys::VOCAB
                    ))),
                }
            })
            .collect::<Result<Vec<char>>>()?;
        if !vocab.windows(2).all(|w| w[0] < w[1]) {
            return Err(bad(format!(
                "{} is not sorted and distinct, as tidepool's tokenizer writes it",
                keys::VOCAB
            )));
        }
        let dropout_seed = number(keys::DROPOUT_SEED)?;
        if dropout_seed != train.seed {
            return Err(bad(format!(
                "{} is {dropout_seed} but the run's seed is {}; tidepool derives one from the other",
                keys::DROPOUT_SEED,
                train.seed
            )));
        }
        train.validate().map_err(|e| bad(e.to_string()))?;
        model.validate().map_err(|e| bad(e.to_string()))?;
        if model != train.model(vocab.len()) {
            return Err(bad(format!(
                "the model config ({} layers, {} heads, width {}, context {}, vocab {}) does \
                 not match the training config and the vocabulary of {} characters",
                model.layers,
                model.heads,
                model.width,
                model.context,
                model.vocab,
                vocab.len()
            )));
        }
        // Sizes in u64 before `params()` multiplies in usize.
        let count = param_count(&model).unwrap_or(u64::MAX);
        if count.saturating_mul(12) > MAX_CHECKPOINT_BYTES {
            return Err(Error::TooLarge(format!(
                "the checkpoint's config declares {count} parameters; with their moments \
                 that is over the {} checkpoint limit (checkpoint::MAX_CHECKPOINT_BYTES)",
                crate::fmt_bytes(MAX_CHECKPOINT_BYTES)
            )));
        }
        let specs = model.params();
        let mut groups: [Vec<Vec<f32>>; 3] = Default::default();
        for (prefix, out) in ["", ADAM_M_PREFIX, ADAM_V_PREFIX].iter().zip(&mut groups) {
            for spec in &specs {
                let name = format!("{prefix}{}", spec.name);
                let view = tensors
                    .tensor(&name)
                    .map_err(|_| bad(format!("tensor {name} is missing")))?;
                let want = shape(&model, &spec.name);
                if view.dtype() != Dtype::F32 || view.shape() != want.as_slice() {
                    return Err(bad(format!(
                        "tensor {name} is {:?} of shape {:?}; the config ({} layers, width {}, \
                         context {}, vocab {}) needs F32 of shape {want:?}",
                        view.dtype(),
                        view.shape(),
                        model.layers,
                        model.width,
                        model.context,
                        model.vocab
                    )));
                }
                let values: Vec<f32> = view
                    .data()
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                // Training keeps every value finite (a non-finite loss stops it), so
                // one that is not was damaged or edited: it would sample garbage.
                if let Some(at) = values.iter().position(|x| !x.is_finite()) {
                    return Err(bad(format!(
                        "tensor {name} holds {} at element {at}; every weight and moment \
                         must be finite",
                        values[at]
                    )));
                }
                out.push(values);
            }
        }
        if tensors.len() != 3 * specs.len() {
            let known: std::collections::HashSet<String> = ["", ADAM_M_PREFIX, ADAM_V_PREFIX]
                .iter()
                .flat_map(|p| specs.iter().map(move |s| format!("{p}{}", s.name)))
                .collect();
            let extra = tensors
                .names()
                .into_iter()
                .find(|n| !known.contains(*n))
                .unwrap_or_default();
            return Err(bad(format!(
                "it holds tensor {extra}, which a {}-layer model does not have",
                model.layers
            )));
        }
        let [params, adam_m, adam_v] = groups;
        Ok(Checkpoint {
            step,
            train,
            model,
            batcher_state: number(keys::BATCHER_STATE)?,
            sample_state: number(keys::SAMPLE_STATE)?,
            vocab,
            params,
            adam_m,
            adam_v,
        })
    }

    /// An error unless `corpus` has this checkpoint's vocabulary (ids must mean the
    /// same characters), naming what differs.
    pub fn check_vocab(&self, corpus: &Corpus) -> Result<()> {
        let theirs = corpus.tokenizer.chars();
        if theirs == self.vocab.as_slice() {
            return Ok(());
        }
        let show = |chars: Vec<char>| -> String {
            let mut s: String = chars.iter().take(20).map(|c| format!("{c:?} ")).collect();
            if chars.len() > 20 {
                s.push_str("...");
            }
            s
        };
        let only_corpus = theirs.iter().filter(|c| !self.vocab.contains(c)).copied();
        let only_ckpt = self.vocab.iter().filter(|c| !theirs.contains(c)).copied();
        Err(Error::Data(format!(
            "{} has another vocabulary than the checkpoint ({} characters against {}; \
             only in the corpus: {}; only in the checkpoint: {}); resume with the text the \
             run was trained on",
            corpus.name,
            theirs.len(),
            self.vocab.len(),
            show(only_corpus.collect()),
            show(only_ckpt.collect()),
        )))
    }

    /// A corpus with this checkpoint's vocabulary and no text: enough to sample,
    /// not to train ([`Trainer::step`] says so).
    pub fn vocab_corpus(&self) -> Corpus {
        let text: String = self.vocab.iter().collect();
        Corpus {
            name: "the checkpoint's vocabulary (no training text: load it with its corpus \
                   to train)"
                .into(),
            bytes: 0,
            tokenizer: Tokenizer::from_text(&text),
            train: Vec::new(),
            val: Vec::new(),
        }
    }
}

/// Metadata values: JSON of types that always serialize.
fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).expect("configs and vocabularies serialize")
}

impl Trainer {
    /// The run so far as a safetensors checkpoint (see the module docs).
    pub async fn save(&self) -> Result<Vec<u8>> {
        self.checkpoint().await?.to_bytes()
    }

    /// The run so far, downloaded from the GPU.
    pub async fn checkpoint(&self) -> Result<Checkpoint> {
        let _checkpoint = self.ctx.on_path(crate::gpu::Path::Checkpoint);
        let (adam_m, adam_v) = self.moments.download(&self.ctx).await?;
        Ok(Checkpoint {
            step: self.step,
            train: self.cfg.clone(),
            model: self.model.clone(),
            batcher_state: self.batcher.state(),
            sample_state: self.sample_rng.state(),
            vocab: self.corpus.tokenizer.chars().to_vec(),
            params: self.params.download(&self.ctx).await?,
            adam_m,
            adam_v,
        })
    }

    /// A trainer that continues the checkpoint's run exactly. `corpus` must have its
    /// vocabulary; without one the trainer can sample but not train.
    pub async fn resume(bytes: &[u8], corpus: Option<Corpus>) -> Result<Trainer> {
        Trainer::resume_with(bytes, corpus, |_| {}).await
    }

    /// [`Trainer::resume`] with settings changed by `edit` first: the schedule
    /// length, evaluation, pooling and the like. What fixes the model and the run's
    /// random streams (layers, heads, width, context, seed) cannot change. A change
    /// to batch, learning rate or dropout makes the continuation differ from the
    /// uninterrupted run, as it would there.
    pub async fn resume_with(
        bytes: &[u8],
        corpus: Option<Corpus>,
        edit: impl FnOnce(&mut TrainConfig),
    ) -> Result<Trainer> {
        let ckpt = Checkpoint::from_bytes(bytes)?;
        Trainer::from_checkpoint(ckpt, corpus, edit).await
    }

    /// [`Trainer::resume_with`] from a checkpoint already read.
    pub async fn from_checkpoint(
        ckpt: Checkpoint,
        corpus: Option<Corpus>,
        edit: impl FnOnce(&mut TrainConfig),
    ) -> Result<Trainer> {
        let corpus = match corpus {
            Some(corpus) => {
                ckpt.check_vocab(&corpus)?;
                corpus
            }
            None => ckpt.vocab_corpus(),
        };
        let mut cfg = ckpt.train.clone();
        edit(&mut cfg);
        let fixed = |c: &TrainConfig| (c.layers, c.heads, c.width, c.context, c.seed);
        if fixed(&cfg) != fixed(&ckpt.train) {
            return Err(Error::Config(
                "layers, heads, width, context and seed come from the checkpoint and \
                 cannot change when resuming"
                    .into(),
            ));
        }
        cfg.validate()?;
        let model = ckpt.model.clone();
        // Every buffer a step needs, counted in u64, against this device.
        let ctx =
            Trainer::open_context(&cfg, model.vocab as u64, ContextOptions::default()).await?;
        let specs = model.params();
        let params = crate::train::with_f16_copy(&ctx, ParamArena::upload(&ctx, &ckpt.params)?);
        let layout = params.layout().clone();
        let moments = Moments::from_values_in(&ctx, layout, &ckpt.adam_m, &ckpt.adam_v)?;
        ctx.flush();
        ctx.take_error()?;
        Ok(Trainer {
            batcher: Batcher::new(ckpt.batcher_state),
            sample_rng: Rng::new(ckpt.sample_state),
            step: ckpt.step,
            last: StepStats {
                step: ckpt.step,
                ..StepStats::default()
            },
            val_loss: None,
            last_figures_at: f64::NEG_INFINITY,
            held_batch: HeldBatch::default(),
            sample_batch: HeldBatch::default(),
            counted: None,
            ctx,
            cfg,
            model,
            specs,
            corpus,
            params,
            moments,
        })
    }

    /// Mean cross-entropy of the model on `inputs` / `targets` (sequences of the
    /// model's context, any number of them), with no dropout: the figure an
    /// independent implementation (scripts/torch_load_checkpoint.py) reproduces.
    pub async fn loss_on(&self, inputs: &[u32], targets: &[u32]) -> Result<f32> {
        let t = self.model.context;
        let v = self.model.vocab as u32;
        if inputs.is_empty() || !inputs.len().is_multiple_of(t) || targets.len() != inputs.len() {
            return Err(Error::Config(format!(
                "a batch is whole sequences of {t} inputs and as many targets; got {} and {}",
                inputs.len(),
                targets.len()
            )));
        }
        if let Some(bad) = inputs.iter().chain(targets).find(|&&id| id >= v) {
            return Err(Error::Config(format!(
                "token id {bad} is not below the vocabulary size {v}"
            )));
        }
        let b = inputs.len() / t;
        let (bytes, what) = self.model.largest_tensor(b, t);
        self.ctx.check_fits(bytes, what)?;
        let loss = self.ctx.scope(|| {
            let batch =
                GpuBatch::upload(&self.ctx, inputs, targets, self.model.vocab, self.cfg.belt);
            let ops = GpuOps::new(&self.ctx, &self.params);
            let acts = model::forward(&ops, &self.model, &self.weights(), &batch, b, t, None);
            model::mean_loss(&ops, &acts)
        });
        Ok(self.ctx.download::<f32>(&loss, 1).await?[0])
    }
}
