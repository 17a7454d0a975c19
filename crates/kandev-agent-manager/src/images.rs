//! Agent images Kandev builds itself.
//!
//! A real agent type's image (`kandev/<recipe>:latest`) is built on the
//! Docker host from the recipe in the repository, `dockerfiles/<recipe>/
//! Dockerfile` (compiled into this binary), the first time a task needs it:
//! the agent's npm package at a pinned version on a base with Node.js, git
//! and CA certificates, run by a non-root user. The base is
//! [`Settings::agent_base_image`] (`KANDEV_AGENT_BASE_IMAGE`): an official
//! Node.js image where a registry answers, or one assembled from the host's
//! own files (`dockerfiles/agent-base/build.sh`) where none does.
//!
//! Concurrent launches of one image wait for one build; a failed build
//! fails them all with the build's own last lines; the next launch tries
//! again. An image built from an older recipe (its `org.kandev.recipe-sha`
//! label differs) is rebuilt, so a new pinned version reaches users.

use std::{
    collections::{HashMap, VecDeque},
    fmt::Write as _,
    time::{Duration, Instant},
};

use bollard::query_parameters::{BuildImageOptions, BuilderVersion};
use futures::StreamExt;
use sha2::{Digest, Sha256};
use tokio::sync::{Mutex, watch};
use tracing::Instrument as _;

use crate::{config::Settings, docker::Docker};

/// A recipe: the Dockerfile of one agent image.
#[derive(Debug)]
pub struct Recipe {
    /// `dockerfiles/<name>/Dockerfile`, built as `kandev/<name>:latest`.
    pub name: &'static str,
    pub dockerfile: &'static str,
    /// About how long a cold build takes here, in seconds (measured on
    /// two cores, mostly npm's download): what a person is told to expect.
    pub typical_seconds: f64,
}

/// The recipes in the repository, compiled in.
pub const RECIPES: &[Recipe] = &[
    Recipe {
        name: "claude-code",
        dockerfile: include_str!("../../../dockerfiles/claude-code/Dockerfile"),
        typical_seconds: 45.0,
    },
    Recipe {
        name: "codex",
        dockerfile: include_str!("../../../dockerfiles/codex/Dockerfile"),
        typical_seconds: 30.0,
    },
    Recipe {
        name: "gemini",
        dockerfile: include_str!("../../../dockerfiles/gemini/Dockerfile"),
        typical_seconds: 15.0,
    },
    Recipe {
        name: "augment-agent",
        dockerfile: include_str!("../../../dockerfiles/augment-agent/Dockerfile"),
        typical_seconds: 10.0,
    },
];

/// The label naming the recipe an image was built from.
pub const LABEL_RECIPE: &str = "org.kandev.recipe";
/// The label holding the SHA-256 of the recipe's text.
pub const LABEL_RECIPE_SHA: &str = "org.kandev.recipe-sha";
/// Build lines kept for a failure's message.
const TAIL_LINES: usize = 12;

/// The recipe that builds `image`, when it is one of Kandev's own
/// (`kandev/<recipe>:latest` or `kandev/<recipe>`).
pub fn recipe_for(image: &str) -> Option<&'static Recipe> {
    let rest = image.strip_prefix("kandev/")?;
    let (name, tag) = rest.split_once(':').unwrap_or((rest, "latest"));
    if tag != "latest" {
        return None;
    }
    RECIPES.iter().find(|r| r.name == name)
}

impl Recipe {
    /// SHA-256 of the recipe's text, hex.
    pub fn sha(&self) -> String {
        let digest = Sha256::digest(self.dockerfile.as_bytes());
        digest.iter().fold(String::with_capacity(64), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    }

    /// The build context: a tar holding only the Dockerfile.
    fn context(&self) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(self.dockerfile.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        // Appending to a Vec cannot fail.
        let _ = builder.append_data(&mut header, "Dockerfile", self.dockerfile.as_bytes());
        builder.into_inner().unwrap_or_default()
    }
}

/// Where an image stands, as the agent-types API shows it.
#[derive(Debug, Clone, PartialEq)]
pub enum ImageStatus {
    Present,
    /// Being built for `seconds` so far; `step` is the build's latest step.
    Building {
        seconds: f64,
        step: String,
    },
    /// The last build failed (and no image appeared since).
    Failed {
        error: String,
    },
    Missing,
}

impl ImageStatus {
    pub fn as_str(&self) -> &'static str {
        match self {
            ImageStatus::Present => "present",
            ImageStatus::Building { .. } => "building",
            ImageStatus::Failed { .. } => "failed",
            ImageStatus::Missing => "missing",
        }
    }
}

/// A build's phase, watched by every launch waiting for it.
#[derive(Debug, Clone)]
enum Phase {
    Building { started: Instant, step: String },
    Built { seconds: f64 },
    Failed { error: String },
}

#[derive(Debug)]
struct Entry {
    phase: watch::Sender<Phase>,
    /// How long the last successful build took.
    last_seconds: Option<f64>,
}

/// How images are built.
#[derive(Debug, Clone)]
pub struct BuildSettings {
    pub base_image: String,
    /// The network of the build's `RUN` steps; empty: the engine's default,
    /// or `host` when the engine has no `bridge` network.
    pub network: String,
    pub npm_registry: String,
    pub timeout: Duration,
    pub enabled: bool,
    /// A missing base may be pulled (`KANDEV_PULL_IMAGES`).
    pub pull: bool,
}

impl BuildSettings {
    pub fn from_settings(settings: &Settings) -> Self {
        BuildSettings {
            base_image: settings.agent_base_image.clone(),
            network: settings.agent_build_network.clone(),
            npm_registry: settings.agent_npm_registry.clone(),
            timeout: Duration::from_secs(settings.agent_build_timeout_secs.max(1)),
            enabled: settings.build_agent_images,
            pull: settings.pull_images,
        }
    }
}

/// Progress of a build, as a launch waiting for it sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    Started,
    Step(String),
    Built { seconds: f64 },
}

/// The builds of this manager's Docker host.
#[derive(Debug)]
pub struct ImageBuilder {
    docker: Docker,
    settings: BuildSettings,
    builds: Mutex<HashMap<String, Entry>>,
}

impl ImageBuilder {
    pub fn new(docker: Docker, settings: BuildSettings) -> Self {
        ImageBuilder {
            docker,
            settings,
            builds: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `image` is one this manager builds when it is missing.
    pub fn can_build(&self, image: &str) -> bool {
        self.settings.enabled && recipe_for(image).is_some()
    }

    /// Whether `image` must be built before it runs: it is one of
    /// Kandev's own and absent (or from an older recipe).
    pub async fn needs_build(&self, image: &str) -> bool {
        match recipe_for(image) {
            Some(recipe) if self.settings.enabled => !self.current(image, recipe).await,
            _ => false,
        }
    }

    /// Whether the host has `image` built from this version of `recipe`;
    /// an image without the label (built by hand) counts as current.
    async fn current(&self, image: &str, recipe: &Recipe) -> bool {
        match self.docker.image_labels(image).await {
            Some(labels) => labels
                .get(LABEL_RECIPE_SHA)
                .is_none_or(|sha| *sha == recipe.sha()),
            None => false,
        }
    }

    /// Builds `image` unless it is current, or waits for the build under
    /// way; `progress` hears its steps. Returns how long the build took
    /// (`None`: nothing was built). The error is the build's, in words.
    pub async fn ensure(
        &self,
        image: &str,
        mut progress: impl FnMut(Progress),
    ) -> Result<Option<f64>, String> {
        let Some(recipe) = recipe_for(image) else {
            return Ok(None);
        };
        let mut rx = {
            let mut builds = self.builds.lock().await;
            let building = builds
                .get(image)
                .is_some_and(|e| matches!(*e.phase.borrow(), Phase::Building { .. }));
            if !building && self.current(image, recipe).await {
                return Ok(None);
            }
            if !building {
                let (tx, _) = watch::channel(Phase::Building {
                    started: Instant::now(),
                    step: String::new(),
                });
                let last_seconds = builds.get(image).and_then(|e| e.last_seconds);
                builds.insert(
                    image.to_string(),
                    Entry {
                        phase: tx.clone(),
                        last_seconds,
                    },
                );
                self.spawn_build(image, recipe, tx);
            }
            builds[image].phase.subscribe()
        };
        progress(Progress::Started);
        loop {
            let phase = rx.borrow_and_update().clone();
            match phase {
                Phase::Building { step, .. } => {
                    if !step.is_empty() {
                        progress(Progress::Step(step));
                    }
                }
                Phase::Built { seconds } => {
                    self.builds
                        .lock()
                        .await
                        .entry(image.to_string())
                        .and_modify(|e| e.last_seconds = Some(seconds));
                    progress(Progress::Built { seconds });
                    return Ok(Some(seconds));
                }
                Phase::Failed { error } => return Err(error),
            }
            if rx.changed().await.is_err() {
                return Err(format!("the build of {image} ended without a result"));
            }
        }
    }

    /// Where `image` stands, and how long its last build took (or about
    /// how long the first takes).
    pub async fn status(&self, image: &str) -> (ImageStatus, Option<f64>) {
        let (phase, last) = {
            let builds = self.builds.lock().await;
            match builds.get(image) {
                Some(e) => (Some(e.phase.borrow().clone()), e.last_seconds),
                None => (None, None),
            }
        };
        let last = last.or_else(|| recipe_for(image).map(|r| r.typical_seconds));
        if let Some(Phase::Building { started, step }) = &phase {
            let seconds = started.elapsed().as_secs_f64();
            let step = step.clone();
            return (ImageStatus::Building { seconds, step }, last);
        }
        let present = match recipe_for(image) {
            Some(recipe) => self.current(image, recipe).await,
            None => self.docker.has_image(image).await,
        };
        let status = match phase {
            _ if present => ImageStatus::Present,
            Some(Phase::Failed { error }) => ImageStatus::Failed { error },
            _ => ImageStatus::Missing,
        };
        (status, last)
    }

    fn spawn_build(&self, image: &str, recipe: &'static Recipe, tx: watch::Sender<Phase>) {
        let docker = self.docker.clone();
        let settings = self.settings.clone();
        let image = image.to_string();
        let span = tracing::info_span!("image_build", %image, recipe = recipe.name);
        // Spawned: the build finishes (for the next launch) even when the
        // launch that started it goes away.
        tokio::spawn(
            async move {
                let started = Instant::now();
                metrics::counter!(crate::metric_names::IMAGE_BUILDS, "phase" => "started")
                    .increment(1);
                let result = tokio::time::timeout(
                    settings.timeout,
                    build(&docker, &settings, &image, recipe, &tx),
                )
                .await
                .unwrap_or_else(|_| {
                    Err(format!(
                        "the build did not finish within {} s",
                        settings.timeout.as_secs()
                    ))
                });
                let seconds = started.elapsed().as_secs_f64();
                let phase = match result {
                    Ok(()) => {
                        tracing::info!(seconds, "agent image built");
                        metrics::counter!(crate::metric_names::IMAGE_BUILDS, "phase" => "built")
                            .increment(1);
                        metrics::histogram!(crate::metric_names::IMAGE_BUILD_SECONDS).record(seconds);
                        Phase::Built { seconds }
                    }
                    Err(error) => {
                        let error = format!(
                            "the agent image {image} could not be built from dockerfiles/{}/Dockerfile: {error}",
                            recipe.name
                        );
                        tracing::warn!(%error, "agent image build failed");
                        metrics::counter!(crate::metric_names::IMAGE_BUILDS, "phase" => "failed")
                            .increment(1);
                        Phase::Failed { error }
                    }
                };
                tx.send_replace(phase);
            }
            .instrument(span),
        );
    }
}

/// One build through the engine's build API; the steps go to `tx`.
async fn build(
    docker: &Docker,
    settings: &BuildSettings,
    image: &str,
    recipe: &Recipe,
    tx: &watch::Sender<Phase>,
) -> Result<(), String> {
    let api = docker.api().map_err(|e| e.to_string())?;
    if !settings.pull && docker.image_labels(&settings.base_image).await.is_none() {
        return Err(format!(
            "its base image {} (KANDEV_AGENT_BASE_IMAGE) is not on the Docker host and pulling \
             is disabled; where no registry answers, dockerfiles/agent-base/build.sh assembles \
             one from the host's own files",
            settings.base_image
        ));
    }
    let network = build_network(docker, settings).await;
    let mut buildargs = HashMap::from([(
        "KANDEV_AGENT_BASE_IMAGE".to_string(),
        settings.base_image.clone(),
    )]);
    if !settings.npm_registry.is_empty() {
        buildargs.insert(
            "NPM_CONFIG_REGISTRY".to_string(),
            settings.npm_registry.clone(),
        );
    }
    let options = BuildImageOptions {
        dockerfile: "Dockerfile".into(),
        t: Some(image.to_string()),
        rm: true,
        forcerm: true,
        buildargs: Some(buildargs),
        labels: Some(HashMap::from([
            (LABEL_RECIPE.to_string(), recipe.name.to_string()),
            (LABEL_RECIPE_SHA.to_string(), recipe.sha()),
        ])),
        networkmode: network,
        version: BuilderVersion::BuilderV1,
        ..Default::default()
    };
    tracing::info!(base = %settings.base_image, "building the agent image");
    let body = bollard::body_full(recipe.context().into());
    let mut stream = api.build_image(options, None, Some(body));
    let mut tail = VecDeque::with_capacity(TAIL_LINES);
    while let Some(item) = stream.next().await {
        let info = item.map_err(|e| with_tail(&e.to_string(), &tail))?;
        if let Some(detail) = info.error_detail.and_then(|d| d.message) {
            return Err(with_tail(&detail, &tail));
        }
        for line in info.stream.iter().flat_map(|s| s.lines()) {
            let line = line.trim_end();
            if line.is_empty() {
                continue;
            }
            if tail.len() == TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line.chars().take(300).collect());
            if line.starts_with("Step ") {
                tx.send_modify(|phase| {
                    if let Phase::Building { step, .. } = phase {
                        *step = line.to_string();
                    }
                });
            }
        }
    }
    match docker.image_labels(image).await {
        Some(_) => Ok(()),
        None => Err(with_tail("the engine reported no image", &tail)),
    }
}

/// `error`, then the build's last lines.
fn with_tail(error: &str, tail: &VecDeque<String>) -> String {
    if tail.is_empty() {
        return error.to_string();
    }
    let lines: Vec<&str> = tail.iter().map(String::as_str).collect();
    format!("{error}\nlast lines of the build:\n{}", lines.join("\n"))
}

/// The network of the build's `RUN` steps (see [`BuildSettings::network`]).
async fn build_network(docker: &Docker, settings: &BuildSettings) -> Option<String> {
    if !settings.network.is_empty() {
        return Some(settings.network.clone());
    }
    if docker.has_network("bridge").await {
        None
    } else {
        Some("host".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kandevs_own_images_have_recipes_and_others_do_not() {
        assert_eq!(
            recipe_for("kandev/claude-code:latest").map(|r| r.name),
            Some("claude-code")
        );
        assert_eq!(recipe_for("kandev/codex").map(|r| r.name), Some("codex"));
        assert_eq!(
            recipe_for("kandev/gemini:latest").map(|r| r.name),
            Some("gemini")
        );
        assert!(recipe_for("kandev/claude-code:1.2").is_none());
        assert!(recipe_for("someone/claude-code:latest").is_none());
        assert!(recipe_for("kandev/mock-agent:latest").is_none());
    }

    #[test]
    fn every_recipe_takes_the_base_as_an_argument_and_runs_as_non_root() {
        for recipe in RECIPES {
            let text = recipe.dockerfile;
            assert!(
                text.contains("ARG KANDEV_AGENT_BASE_IMAGE"),
                "{}",
                recipe.name
            );
            assert!(
                text.contains("FROM ${KANDEV_AGENT_BASE_IMAGE}"),
                "{}",
                recipe.name
            );
            assert!(text.contains("USER "), "{}", recipe.name);
            assert_eq!(recipe.sha().len(), 64);
        }
    }

    #[test]
    fn the_context_is_a_tar_with_the_dockerfile_alone() {
        let recipe = &RECIPES[0];
        let bytes = recipe.context();
        let mut archive = tar::Archive::new(bytes.as_slice());
        let names: Vec<String> = archive
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["Dockerfile"]);
    }

    #[test]
    fn a_failure_carries_the_last_lines() {
        let tail = VecDeque::from([
            "Step 3/7 : RUN npm install".to_string(),
            "npm error 404".into(),
        ]);
        let text = with_tail("exit code 1", &tail);
        assert!(text.starts_with("exit code 1\nlast lines of the build:\nStep 3/7"));
        assert!(text.ends_with("npm error 404"));
    }
}
