//! The agent's boundary, attacked: whatever an agent writes into its clone
//! (git configuration, attributes, hooks, links, special files) is never
//! run, followed or read outside it by the host's Changes and delivery, a
//! push goes only to the task's repository and branch, and agents run as
//! an unprivileged user in workspaces no other local user can reach.
//! Each test reproduces a finding of the security review (issue 37) and
//! asserts the refusal; `docs/security.md` lists them.

use std::{
    os::unix::{fs::symlink, process::CommandExt},
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use kandev_agent_manager::{
    changes,
    delivery::{self, Author, Ship},
};
use kandev_proto::v1 as pb;

use crate::{
    clones::{Clone, clone_of, git, write},
    helpers::{Launched, containers_of, inspect, spawn_app},
};

fn ada() -> Author {
    Author {
        name: "Ada".into(),
        email: "ada@example.com".into(),
    }
}

/// A file or directory outside the clone that must never be touched.
fn marker(clone: &Clone, name: &str) -> PathBuf {
    clone.root().join("outside").join(name)
}

/// Runs Changes (the list and every file's diff) and a local delivery, as
/// the task's owner opening the Changes tab and approving would; every
/// text they return.
async fn review(clone: &Clone) -> String {
    let mut seen = String::new();
    if let Ok(list) = changes::changes(&clone.task).await {
        seen.push_str(&format!("{list:?}"));
        for file in list.files {
            if let Ok(diff) = changes::file_diff(&clone.task, &file.path, 1 << 20).await {
                seen.push_str(&diff.diff);
            }
        }
    }
    if let Ok(done) = delivery::deliver(
        &clone.task,
        &clone.settings,
        "work",
        &ada(),
        Ship::Commit,
        None,
    )
    .await
    {
        seen.push_str(&format!("{done:?}"));
    }
    seen
}

/// Every object of the task's remote, as text.
fn remote_objects(clone: &Clone) -> String {
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(clone.remote())
        .args(["cat-file", "--batch-all-objects", "--batch"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Finding 1: the agent wrote `[kandev] baseCommit = --output=<host path>`
/// into its clone's configuration; opening Changes made host git write a
/// root-owned file there.
#[tokio::test]
async fn finding_1_a_base_commit_the_agent_writes_is_never_an_argument() {
    let clone = clone_of(&[("README.md", b"# Demo\n")], "base").await;
    let target = marker(&clone, "written-by-git");
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    let config = clone.work().join(".git/config");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "[kandev]\n\tbaseCommit = --output={}\n\tbaseBranch = --output={}\n",
        target.display(),
        target.display()
    ));
    std::fs::write(&config, text).unwrap();
    write(&clone.work(), "README.md", b"# Demo\n\nedited\n");

    let listed = changes::changes(&clone.task).await.unwrap();
    assert_eq!(
        listed.base_commit,
        clone.remote_git(&["rev-parse", "main"]).trim()
    );
    assert_eq!(listed.files.len(), 1, "{:?}", listed.files);
    review(&clone).await;
    assert!(!target.exists(), "git wrote where the agent said");
}

/// Finding 2: the agent swapped its configuration for one with a clean
/// filter (and every other key that runs a program) while Kandev staged
/// its work: `id` ran as root on the host.
#[tokio::test]
async fn finding_2_programs_the_agents_repository_names_never_run() {
    let clone = clone_of(&[("README.md", b"# Demo\n")], "filters").await;
    let ran = marker(&clone, "ran");
    std::fs::create_dir_all(ran.parent().unwrap()).unwrap();
    let touch = format!("touch {}", ran.display());
    let work = clone.work();
    let hostile = format!(
        "[core]\n\tfsmonitor = {touch}\n\thooksPath = {hooks}\n\tsshCommand = {touch}\n\
         \tpager = {touch}\n\teditor = {touch}\n\tattributesFile = {attrs}\n\
         [filter \"x\"]\n\tclean = {touch}\n\tsmudge = {touch}\n\tprocess = {touch}\n\trequired = true\n\
         [diff \"x\"]\n\ttextconv = {touch}\n\tcommand = {touch}\n\
         [diff]\n\texternal = {touch}\n\
         [include]\n\tpath = {include}\n\
         [credential]\n\thelper = !{touch}\n\
         [uploadpack]\n\tpackObjectsHook = {touch}\n",
        hooks = work.join(".git/hooks").display(),
        attrs = work.join("attrs").display(),
        include = work.join("included").display(),
    );
    write(
        &work,
        "included",
        format!("[core]\n\tfsmonitor = {touch}\n").as_bytes(),
    );
    write(&work, ".gitattributes", b"* filter=x diff=x merge=x\n");
    write(&work, "attrs", b"* filter=x\n");
    for hook in [
        "pre-commit",
        "commit-msg",
        "post-commit",
        "pre-push",
        "reference-transaction",
    ] {
        write(
            &work,
            &format!(".git/hooks/{hook}"),
            format!("#!/bin/sh\n{touch}\n").as_bytes(),
        );
        let path = work.join(".git/hooks").join(hook);
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    write(&work, "README.md", b"# Demo\n\nedited\n");
    // The agent keeps swapping a safe configuration and the hostile one.
    let config = work.join(".git/config");
    let safe = std::fs::read_to_string(&config).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = std::fs::write(&config, &hostile);
                std::thread::yield_now();
                let _ = std::fs::write(&config, &safe);
            }
        })
    };
    for _ in 0..10 {
        review(&clone).await;
    }
    delivery::deliver(&clone.task, &clone.settings, "w", &ada(), Ship::Push, None)
        .await
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    assert!(!ran.exists(), "a program the agent named ran on the host");
}

/// Finding 3: with `.git/objects` and `.git/refs` made links to another
/// repository on the host, Changes listed that repository's files and
/// served their contents.
#[tokio::test]
async fn finding_3_another_repository_on_the_host_is_never_read() {
    let clone = clone_of(&[("README.md", b"# Demo\n")], "links").await;
    let secret_repo = clone.root().join("outside/secret");
    std::fs::create_dir_all(&secret_repo).unwrap();
    git(&secret_repo, &["init", "-q", "-b", "main"]);
    write(&secret_repo, "private.txt", b"TOKEN-b4c0n-SECRET\n");
    git(&secret_repo, &["add", "-A"]);
    git(&secret_repo, &["commit", "-q", "-m", "private"]);
    let work = clone.work();
    for part in ["objects", "refs"] {
        std::fs::remove_dir_all(work.join(".git").join(part)).unwrap();
        symlink(
            secret_repo.join(".git").join(part),
            work.join(".git").join(part),
        )
        .unwrap();
    }
    // Links in the work tree, to the file and to its directory.
    symlink(secret_repo.join("private.txt"), work.join("leak.txt")).unwrap();
    symlink(&secret_repo, work.join("leakdir")).unwrap();
    // A nested repository pointing at it.
    write(
        &work,
        "sub/.git",
        format!("gitdir: {}\n", secret_repo.join(".git").display()).as_bytes(),
    );

    let seen = review(&clone).await;
    let listed = changes::changes(&clone.task).await.unwrap();
    let paths: Vec<_> = listed.files.iter().map(|f| f.path.as_str()).collect();
    assert!(!paths.contains(&"private.txt"), "{paths:?}");
    assert!(
        paths.contains(&"leak.txt") && paths.contains(&"leakdir"),
        "{paths:?}"
    );
    let link = changes::file_diff(&clone.task, "leak.txt", 1 << 20)
        .await
        .unwrap();
    assert!(
        link.diff.contains("new file mode 120000"),
        "a link, as a link: {}",
        link.diff
    );
    delivery::deliver(&clone.task, &clone.settings, "w", &ada(), Ship::Push, None)
        .await
        .unwrap();
    assert!(!seen.contains("TOKEN-b4c0n-SECRET"), "{seen}");
    assert!(!link.diff.contains("TOKEN-b4c0n-SECRET"));
    assert!(!remote_objects(&clone).contains("TOKEN-b4c0n-SECRET"));
}

/// Finding 5: delivery pushed to the `remote.origin.url` and the branch
/// `HEAD` names, both read from the agent's configuration.
#[tokio::test]
async fn finding_5_delivery_pushes_only_to_the_tasks_repository_and_branch() {
    let clone = clone_of(&[("README.md", b"# Demo\n")], "push").await;
    let evil = clone.root().join("repos/evil.git");
    git(clone.root(), &["init", "-q", "--bare", "repos/evil.git"]);
    let work = clone.work();
    let evil_url = evil.display().to_string();
    git(&work, &["remote", "set-url", "origin", &evil_url]);
    git(&work, &["config", "remote.origin.pushurl", &evil_url]);
    git(&work, &["config", "branch.main.remote", "origin"]);
    git(&work, &["checkout", "-q", "-b", "attacker-branch"]);
    write(&work, "README.md", b"# Demo\n\nthe work\n");

    let done = delivery::deliver(
        &clone.task,
        &clone.settings,
        "The work",
        &ada(),
        Ship::Push,
        Some("x-access-token:t0k3n"),
    )
    .await
    .unwrap();
    assert!(done.branch.starts_with("kandev/"), "{}", done.branch);
    assert_eq!(
        done.pushed_to.as_deref(),
        Some(clone.remote().display().to_string().as_str())
    );
    assert_eq!(
        clone.remote_git(&["show", &format!("{}:README.md", done.branch)]),
        "# Demo\n\nthe work\n"
    );
    let refs = std::process::Command::new("git")
        .args(["--git-dir", &evil_url, "for-each-ref"])
        .output()
        .unwrap();
    assert!(refs.stdout.is_empty(), "the agent's remote got a push");
    assert!(
        clone
            .remote_git(&["branch", "--list", "attacker-branch"])
            .is_empty()
    );
}

/// Finding 4: agents ran as root, so a `chmod 4755` copy of `sh` in a
/// workspace (mode 0755) gave root to every local user. Now the container
/// runs as the agent's user, what the agent writes is that user's, and no
/// other local user can enter a workspace.
#[tokio::test]
async fn finding_4_agents_run_unprivileged_in_workspaces_closed_to_other_users() {
    let mut app = spawn_app().await;
    let Launched {
        task,
        mut watch,
        instance,
        ..
    } = app.launch_watched("mock-agent", "wait-cancel").await;
    watch.until("agent.running", 0).await;
    let ids = containers_of(&instance.id);
    let info = inspect(&ids[0]);
    assert_eq!(info["Config"]["User"], "1000:1000");
    let pid = info["State"]["Pid"].as_i64().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uids = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert_eq!(
        uids.split_whitespace().skip(1).collect::<Vec<_>>(),
        ["1000"; 4],
        "{uids}"
    );
    // The workspace is mounted nosuid,nodev in the container (the manager,
    // root here, sealed its workspaces root).
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let workspace_mount = mounts
        .lines()
        .find(|l| l.split(' ').nth(4) == Some("/workspace"))
        .unwrap_or_else(|| panic!("no /workspace in {mounts}"));
    let options = workspace_mount.split(' ').nth(5).unwrap();
    assert!(
        options.split(',').any(|o| o == "nosuid") && options.split(',').any(|o| o == "nodev"),
        "{workspace_mount}"
    );
    let workspace = app.path("workspaces").join(task.to_string());
    for dir in [workspace.parent().unwrap(), workspace.as_path()] {
        let mode = std::fs::metadata(dir).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o077,
            0,
            "{} is open to other users",
            dir.display()
        );
    }
    // Another local user cannot even look inside.
    let peek = std::process::Command::new("ls")
        .arg(&workspace)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(!peek.status.success(), "nobody listed a workspace");
    app.client
        .stop_agent(pb::StopAgentRequest {
            instance_id: instance.id.clone(),
            reason: "enough".into(),
        })
        .await
        .unwrap();
    app.stop().await;
}

/// A small deterministic generator (no two runs differ, so a failure
/// replays).
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<'a, T>(&mut self, from: &'a [T]) -> &'a T {
        &from[(self.next() % from.len() as u64) as usize]
    }
}

/// One hostile write into the clone at `work`, as a prompted agent could.
fn hostile_write(dice: &mut Dice, work: &Path, outside: &Path) {
    let touch = format!("touch {}/ran-{}", outside.display(), dice.next() % 1000);
    let keys = [
        "core.fsmonitor",
        "core.hooksPath",
        "core.sshCommand",
        "filter.x.clean",
        "filter.x.process",
        "diff.x.textconv",
        "diff.external",
        "credential.helper",
        "kandev.baseCommit",
        "remote.origin.url",
    ];
    let names = [
        "a",
        "b/c",
        "--output=x",
        "-c",
        ".gitattributes",
        "d/e/f",
        "link",
        "dir",
    ];
    let name = *dice.pick(&names);
    let path = work.join(name);
    let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
    if let Some(parent) = path.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    match dice.next() % 9 {
        0 => {
            let key = dice.pick(&keys);
            let config = work.join(".git/config");
            let mut text = std::fs::read_to_string(&config).unwrap_or_default();
            let (section, rest) = key.split_once('.').unwrap();
            let (sub, name) = rest
                .rsplit_once('.')
                .map_or((None, rest), |(s, n)| (Some(s), n));
            match sub {
                Some(sub) => text.push_str(&format!("[{section} \"{sub}\"]\n\t{name} = {touch}\n")),
                None => text.push_str(&format!("[{section}]\n\t{name} = {touch}\n")),
            }
            let _ = std::fs::write(config, text);
        }
        1 => {
            // Replaced, not written through: it may be a FIFO by now.
            let attributes = work.join(".gitattributes");
            let _ = std::fs::remove_file(&attributes);
            let _ = std::fs::write(attributes, "* filter=x diff=x\n");
        }
        2 => {
            let hook = work.join(".git/hooks/pre-commit");
            let _ = std::fs::write(&hook, format!("#!/bin/sh\n{touch}\n"));
            let _ = std::fs::set_permissions(
                &hook,
                std::os::unix::fs::PermissionsExt::from_mode(0o755),
            );
        }
        3 => {
            let target = dice.pick(&["/etc/passwd", "/", "/root", "/proc/self/environ"]);
            let _ = symlink(target, &path);
        }
        4 => {
            let _ = symlink(outside.join("secret.txt"), &path);
        }
        5 => {
            let _ = nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o644));
        }
        6 => {
            let _ = std::os::unix::net::UnixListener::bind(&path);
        }
        7 => {
            let _ = std::fs::write(&path, format!("content {}\n", dice.next()));
        }
        _ => {
            let _ = std::fs::create_dir_all(path.join("inner"));
            let _ = std::fs::write(
                path.join("inner/.git"),
                format!("gitdir: {}\n", outside.display()),
            );
        }
    }
}

/// An agent writes randomized git configuration, attributes, hooks,
/// links and special files into its clone while Changes and delivery run
/// in a loop: nothing runs, nothing outside the clone is read or written,
/// and nothing hangs.
#[tokio::test]
async fn randomized_hostile_writes_never_cross_the_boundary() {
    let clone = clone_of(&[("README.md", b"# Demo\n"), ("a", b"a\n")], "fuzz").await;
    let outside = clone.root().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "TOKEN-f00z-SECRET\n").unwrap();
    let work = clone.work();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, work, outside) = (stop.clone(), work.clone(), outside.clone());
        std::thread::spawn(move || {
            let mut dice = Dice(0x9e37_79b9_7f4a_7c15);
            let mut writes = 0u64;
            while !stop.load(Ordering::Relaxed) {
                hostile_write(&mut dice, &work, &outside);
                writes += 1;
            }
            writes
        })
    };
    let mut seen = String::new();
    for round in 0..25 {
        let reviewed = tokio::time::timeout(Duration::from_secs(60), review(&clone))
            .await
            .unwrap_or_else(|_| panic!("round {round} hung"));
        seen.push_str(&reviewed);
        if round % 5 == 4 {
            let pushed = tokio::time::timeout(
                Duration::from_secs(60),
                delivery::deliver(&clone.task, &clone.settings, "w", &ada(), Ship::Push, None),
            )
            .await
            .unwrap_or_else(|_| panic!("delivery {round} hung"));
            seen.push_str(&format!("{pushed:?}"));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let writes = writer.join().unwrap();
    assert!(writes > 100, "the agent wrote only {writes} times");
    let ran: Vec<_> = std::fs::read_dir(&outside)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n != "secret.txt")
        .collect();
    assert!(
        ran.is_empty(),
        "programs ran or files appeared outside: {ran:?}"
    );
    assert!(
        !seen.contains("TOKEN-f00z-SECRET"),
        "an outside file was read"
    );
    assert!(!seen.contains("root:x:0:0"), "/etc/passwd was read");
    assert!(!remote_objects(&clone).contains("TOKEN-f00z-SECRET"));
    assert!(!remote_objects(&clone).contains("root:x:0:0"));
}
