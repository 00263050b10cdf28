//! Packaging: the cargo-lambda zips of the handlers, found and hashed
//! before any request (a missing zip is a usage error), go to an artifacts
//! bucket under content-hash keys (`<package>/<sha256>.zip`). Unchanged code
//! keeps its key, so CloudFormation sees no change and does not touch the
//! function. The template goes to the same bucket when it is too large to
//! send inline.
//!
//! The bucket's name is predictable, so its name alone proves nothing:
//! every call to it names the caller's account as `ExpectedBucketOwner`
//! (S3 answers 403 when another account owns it), every upload carries the
//! content's SHA-256 (`ChecksumSHA256`, which S3 checks and stores), and an
//! object already under a key is reused only when `HeadObject` with
//! `ChecksumMode=ENABLED` returns that same SHA-256. An object whose
//! checksum is missing or differs is uploaded again, and the report says so.

use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};

use aws_sdk_s3::primitives::ByteStream;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_runtime_api::http::Response;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::config::{Config, StackInputs, validate_bucket_name};
use crate::connect;
use crate::error::{self, Error, Result};

/// Each handler package and the template parameter carrying its S3 key.
pub const HANDLERS: [(&str, &str); 4] = [
    ("stream-counter", stack::params::STREAM_COUNTER_CODE_KEY),
    ("dlq-reprocessor", stack::params::DLQ_REPROCESSOR_CODE_KEY),
    ("api", stack::params::API_CODE_KEY),
    ("drift-check", stack::params::DRIFT_CHECK_CODE_KEY),
];

/// CloudFormation's limit for an inline `TemplateBody`, bytes.
pub const INLINE_TEMPLATE_MAX: usize = 51_200;

/// One handler zip: where it came from and where it lives in the bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Artifact {
    pub package: String,
    pub parameter: String,
    pub path: PathBuf,
    pub sha256: String,
    pub size: u64,
    pub key: String,
    pub state: ArtifactState,
    /// Why an object under the key was not trusted, when it was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Whether a zip had to go to the bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactState {
    /// Hashed, the bucket not consulted yet.
    Local,
    /// Uploaded by this run.
    Uploaded,
    /// The bucket already held this content (its SHA-256 checksum
    /// matches): nothing to upload.
    Present,
    /// Not in the bucket yet; a deploy uploads it (plan only looks).
    Missing,
    /// The key was there with a missing or different checksum; a deploy
    /// uploads it again (plan only looks).
    Untrusted,
    /// Uploaded by this run over an object whose checksum was missing or
    /// differed.
    Replaced,
}

/// What the bucket holds under an artifact's key, compared with the
/// content the key names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remote {
    Absent,
    /// Present with the expected SHA-256: safe to reuse.
    Verified,
    /// Present, but S3 returned no SHA-256 checksum for it (uploaded
    /// without one, or by something else).
    NoChecksum,
    /// Present with another SHA-256: not the content the key names.
    Differs {
        found: String,
    },
}

impl Remote {
    /// Compares the `ChecksumSHA256` HeadObject returned (base64, `None`
    /// when absent) with the content's hex SHA-256.
    pub fn of(found: Option<&str>, sha256_hex: &str) -> Self {
        match found {
            None => Self::NoChecksum,
            Some(found) if found == sha256_base64(sha256_hex) => Self::Verified,
            Some(found) => Self::Differs {
                found: found.to_owned(),
            },
        }
    }

    /// Why an object present under the key is not reused, if it is not.
    pub fn distrust(&self) -> Option<String> {
        match self {
            Self::Absent | Self::Verified => None,
            Self::NoChecksum => Some("the object under this key has no SHA-256 checksum".to_owned()),
            Self::Differs { found } => Some(format!(
                "the object under this key has another SHA-256 checksum ({found})"
            )),
        }
    }
}

/// The base64 form S3 uses for `ChecksumSHA256` of a lowercase hex digest.
pub fn sha256_base64(sha256_hex: &str) -> String {
    let bytes: Vec<u8> = (0..sha256_hex.len() / 2)
        .filter_map(|i| u8::from_str_radix(&sha256_hex[2 * i..2 * i + 2], 16).ok())
        .collect();
    aws_smithy_types::base64::encode(bytes)
}

/// The zip of `package` under `dir`, as cargo-lambda lays it out.
pub fn zip_path(dir: &Path, package: &str) -> PathBuf {
    dir.join(package).join("bootstrap.zip")
}

/// The bucket key of a zip: the package, then the content hash.
pub fn artifact_key(package: &str, sha256: &str) -> String {
    format!("{package}/{sha256}.zip")
}

/// `<stack-name>-artifacts-<account>-<region>`, lowercased (bucket names
/// are), checked against S3's naming rules.
pub fn bucket_name(stack_name: &str, account: &str, region: &str) -> Result<String> {
    let name = format!("{}-artifacts-{account}-{region}", stack_name.to_ascii_lowercase());
    validate_bucket_name(&name)?;
    Ok(name)
}

/// Lowercase hex SHA-256 of a byte slice.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(digest: &[u8]) -> String {
    digest.iter().fold(String::with_capacity(64), |mut out, byte| {
        let _ = write!(out, "{byte:02x}");
        out
    })
}

/// Hashes the file at `path` and returns (sha256, size), streaming it.
pub fn hash_file(path: &Path) -> Result<(String, u64)> {
    let mut file = std::fs::File::open(path).map_err(Error::io("cannot open", path))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut size = 0u64;
    loop {
        let read = file.read(&mut buffer).map_err(Error::io("cannot read", path))?;
        if read == 0 {
            break;
        }
        size += read as u64;
        hasher.update(&buffer[..read]);
    }
    Ok((hex(&hasher.finalize()), size))
}

/// Finds and hashes every handler zip under `dir`; a missing one is an
/// error telling the operator to build first. No I/O beyond the files.
pub fn locate(dir: &Path) -> Result<Vec<Artifact>> {
    HANDLERS
        .iter()
        .map(|(package, parameter)| {
            let path = zip_path(dir, package);
            if !path.is_file() {
                return Err(Error::MissingArtifact {
                    package: (*package).to_owned(),
                    path,
                });
            }
            let (sha256, size) = hash_file(&path)?;
            Ok(Artifact {
                package: (*package).to_owned(),
                parameter: (*parameter).to_owned(),
                key: artifact_key(package, &sha256),
                path,
                sha256,
                size,
                state: ArtifactState::Local,
                note: None,
            })
        })
        .collect()
}

/// Creates `bucket` unless it exists and `owner` (the caller's account)
/// owns it. Returns whether it was created.
pub async fn ensure_bucket(s3: &aws_sdk_s3::Client, bucket: &str, owner: &str, region: &str) -> Result<bool> {
    match s3
        .head_bucket()
        .bucket(bucket)
        .expected_bucket_owner(owner)
        .send()
        .await
    {
        Ok(_) => return Ok(false),
        Err(err) if error::error_code(&err) == Some("Forbidden") || status_of(&err) == Some(403) => {
            return Err(Error::Aws {
                action: "HeadBucket",
                message: format!(
                    "the bucket {bucket} exists but is not owned by account {owner} or this account cannot use it \
                     (S3 bucket names are global); pass --artifacts-bucket with another name"
                ),
            });
        }
        Err(err) if missing(&err, |e| e.is_not_found()) => {}
        Err(err) => return Err(error::aws("HeadBucket")(err)),
    }
    let mut create = s3.create_bucket().bucket(bucket);
    // us-east-1 is the one region that refuses an explicit location.
    if region != "us-east-1" {
        create = create.create_bucket_configuration(
            aws_sdk_s3::types::CreateBucketConfiguration::builder()
                .location_constraint(aws_sdk_s3::types::BucketLocationConstraint::from(region))
                .build(),
        );
    }
    match create.send().await {
        Ok(_) => Ok(true),
        // A concurrent deploy created it between the two calls.
        Err(err)
            if err
                .as_service_error()
                .is_some_and(|e| e.is_bucket_already_owned_by_you()) =>
        {
            Ok(false)
        }
        Err(err) => Err(error::aws("CreateBucket")(err)),
    }
}

fn status_of<E>(err: &SdkError<E, Response>) -> Option<u16> {
    err.raw_response().map(|r| r.status().as_u16())
}

/// A HEAD of what is not there: the operation's `NotFound` (`not_found`
/// tells it), or a bare 404.
fn missing<E>(err: &SdkError<E, Response>, not_found: impl FnOnce(&E) -> bool) -> bool {
    err.as_service_error().is_some_and(not_found) || status_of(err) == Some(404)
}

/// What `bucket` (owned by `owner`) holds under `key`, checked against the
/// content's hex SHA-256.
pub async fn remote(s3: &aws_sdk_s3::Client, bucket: &str, owner: &str, key: &str, sha256: &str) -> Result<Remote> {
    let head = s3
        .head_object()
        .bucket(bucket)
        .key(key)
        .expected_bucket_owner(owner)
        .checksum_mode(aws_sdk_s3::types::ChecksumMode::Enabled)
        .send()
        .await;
    match head {
        Ok(out) => Ok(Remote::of(out.checksum_sha256(), sha256)),
        Err(err) if missing(&err, |e| e.is_not_found()) => Ok(Remote::Absent),
        Err(err) => Err(error::aws("HeadObject")(err)),
    }
}

/// Marks each artifact present, missing or untrusted in `bucket` (a
/// missing bucket holds nothing), without uploading.
pub async fn check(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    owner: &str,
    bucket_exists: bool,
    artifacts: &mut [Artifact],
) -> Result<()> {
    for artifact in artifacts.iter_mut() {
        let found = if bucket_exists {
            remote(s3, bucket, owner, &artifact.key, &artifact.sha256).await?
        } else {
            Remote::Absent
        };
        artifact.note = found.distrust();
        artifact.state = match found {
            Remote::Verified => ArtifactState::Present,
            Remote::Absent => ArtifactState::Missing,
            Remote::NoChecksum | Remote::Differs { .. } => ArtifactState::Untrusted,
        };
    }
    Ok(())
}

/// Whether `bucket` exists and `owner` owns it.
pub async fn bucket_exists(s3: &aws_sdk_s3::Client, bucket: &str, owner: &str) -> Result<bool> {
    match s3
        .head_bucket()
        .bucket(bucket)
        .expected_bucket_owner(owner)
        .send()
        .await
    {
        Ok(_) => Ok(true),
        Err(err) if missing(&err, |e| e.is_not_found()) => Ok(false),
        Err(err) => Err(error::aws("HeadBucket")(err)),
    }
}

/// Uploads each artifact unless `bucket` already holds its key with the
/// same SHA-256 checksum; an object with a missing or different checksum
/// is replaced (state [`ArtifactState::Replaced`], the reason in `note`).
pub async fn upload(s3: &aws_sdk_s3::Client, bucket: &str, owner: &str, artifacts: &mut [Artifact]) -> Result<()> {
    for artifact in artifacts.iter_mut() {
        let found = remote(s3, bucket, owner, &artifact.key, &artifact.sha256).await?;
        if found == Remote::Verified {
            artifact.state = ArtifactState::Present;
            continue;
        }
        let body = ByteStream::from_path(&artifact.path).await.map_err(|e| Error::Io {
            action: "cannot read",
            path: artifact.path.clone(),
            source: std::io::Error::other(e),
        })?;
        put(
            s3,
            bucket,
            owner,
            &artifact.key,
            "application/zip",
            &artifact.sha256,
            body,
        )
        .await?;
        artifact.note = found.distrust();
        artifact.state = if artifact.note.is_some() {
            ArtifactState::Replaced
        } else {
            ArtifactState::Uploaded
        };
    }
    Ok(())
}

/// One `PutObject` to the artifacts bucket: expected owner and the
/// content's SHA-256, which S3 verifies against the bytes and stores.
async fn put(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    owner: &str,
    key: &str,
    content_type: &str,
    sha256: &str,
    body: ByteStream,
) -> Result<()> {
    s3.put_object()
        .bucket(bucket)
        .key(key)
        .expected_bucket_owner(owner)
        .content_type(content_type)
        .checksum_algorithm(aws_sdk_s3::types::ChecksumAlgorithm::Sha256)
        .checksum_sha256(sha256_base64(sha256))
        .body(body)
        .send()
        .await
        .map_err(error::aws("PutObject"))?;
    Ok(())
}

/// Uploads a template too large to send inline, unless the bucket holds it
/// with the same checksum; returns its key.
pub async fn upload_template(s3: &aws_sdk_s3::Client, bucket: &str, owner: &str, body: &str) -> Result<String> {
    let sha256 = sha256_hex(body.as_bytes());
    let key = format!("templates/{sha256}.yaml");
    if remote(s3, bucket, owner, &key, &sha256).await? != Remote::Verified {
        let bytes = ByteStream::from(body.as_bytes().to_vec());
        put(s3, bucket, owner, &key, "application/x-yaml", &sha256, bytes).await?;
    }
    Ok(key)
}

/// The URL CloudFormation reads a template object from: path-style on an
/// emulator endpoint, virtual-hosted on AWS.
pub fn template_url(endpoint: Option<&str>, bucket: &str, region: &str, key: &str) -> String {
    match endpoint {
        Some(endpoint) => format!("{}/{bucket}/{key}", endpoint.trim_end_matches('/')),
        None => format!("https://{bucket}.s3.{region}.amazonaws.com/{key}"),
    }
}

/// The handler zips' directory: `--artifacts-dir`, else cargo-lambda's
/// output under the target directory (`CARGO_TARGET_DIR`, which the
/// Makefile exports as cargo resolves it, or the workspace's `target/`).
pub fn artifacts_dir(config: &Config, inputs: &StackInputs, workspace: Option<&Path>) -> PathBuf {
    if let Some(dir) = &inputs.artifacts_dir {
        return dir.clone();
    }
    let base = workspace.map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let target = match &config.env.cargo_target_dir {
        Some(dir) if dir.is_absolute() => dir.clone(),
        Some(dir) => base.join(dir),
        None => base.join("target"),
    };
    target.join("lambda")
}

/// Finds and hashes the handler zips: the first thing plan and deploy do,
/// before any request (a missing zip is a usage error, exit 2).
pub fn locate_artifacts(config: &Config, inputs: &StackInputs) -> Result<Vec<Artifact>> {
    locate(&artifacts_dir(config, inputs, connect::workspace_root().as_deref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`HANDLERS`] names every handler package, as the directories under
    /// `handlers/` (the packages' names, localstack/runner/src/binaries.rs)
    /// do: a handler added there without its zip's parameter fails here.
    #[test]
    fn every_handler_package_has_its_code_key_parameter() {
        let handlers = Path::new(env!("CARGO_MANIFEST_DIR")).join("../handlers");
        let mut packages: Vec<String> = std::fs::read_dir(&handlers)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|dir| dir.join("Cargo.toml").is_file())
            .map(|dir| dir.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        packages.sort();
        let mut named: Vec<&str> = HANDLERS.iter().map(|(package, _)| *package).collect();
        named.sort_unstable();
        assert_eq!(packages, named);
    }

    #[test]
    fn keys_are_package_then_content_hash() {
        let sha = sha256_hex(b"zip bytes");
        assert_eq!(sha.len(), 64);
        assert_eq!(artifact_key("api", &sha), format!("api/{sha}.zip"));
        // The same content always gets the same key: unchanged code is not redeployed.
        assert_eq!(sha256_hex(b"zip bytes"), sha);
        assert_ne!(sha256_hex(b"other bytes"), sha);
    }

    #[test]
    fn sha256_matches_the_known_vector() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn hashing_a_file_streams_the_same_digest() {
        let dir = std::env::temp_dir().join(format!("ops-cli-hash-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.bin");
        let content = vec![7u8; 200_000];
        std::fs::write(&path, &content).unwrap();
        assert_eq!(hash_file(&path).unwrap(), (sha256_hex(&content), 200_000));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_zip_says_to_build_first() {
        let err = locate(Path::new("/nonexistent/lambda")).unwrap_err();
        assert!(matches!(&err, Error::MissingArtifact { package, .. } if package == "stream-counter"));
        assert!(err.to_string().contains("make build"), "{err}");
    }

    #[test]
    fn bucket_names_follow_s3_rules() {
        assert_eq!(
            bucket_name("Hybrid-Counter", "000000000000", "us-east-1").unwrap(),
            "hybrid-counter-artifacts-000000000000-us-east-1"
        );
        let err = bucket_name(&"s".repeat(40), "123456789012", "ap-southeast-2").unwrap_err();
        assert!(err.to_string().contains("S3 allows 3 to 63"), "{err}");
        assert!(validate_bucket_name("my_bucket").is_err());
        assert!(validate_bucket_name("-bucket").is_err());
        assert!(validate_bucket_name("a..b").is_err());
        assert!(validate_bucket_name("my.bucket-1").is_ok());
    }

    #[test]
    fn template_urls_are_path_style_on_an_endpoint() {
        assert_eq!(
            template_url(Some("http://127.0.0.1:4566/"), "b", "us-east-1", "templates/x.yaml"),
            "http://127.0.0.1:4566/b/templates/x.yaml"
        );
        assert_eq!(
            template_url(None, "b", "eu-west-1", "templates/x.yaml"),
            "https://b.s3.eu-west-1.amazonaws.com/templates/x.yaml"
        );
    }

    #[test]
    fn the_artifacts_dir_defaults_to_cargo_lambdas_output() {
        let argv = [
            "counterctl",
            "--region",
            "",
            "--endpoint-url",
            "",
            "--profile",
            "",
            "status",
        ];
        let cli = <crate::cli::Cli as clap::Parser>::try_parse_from(argv).unwrap();
        let mut config = Config::from_cli(cli, &|_| None).unwrap();
        let inputs = StackInputs::default();
        assert_eq!(
            artifacts_dir(&config, &inputs, Some(Path::new("/ws"))),
            PathBuf::from("/ws/target/lambda")
        );
        config.env.cargo_target_dir = Some(PathBuf::from("/tmp/t"));
        assert_eq!(
            artifacts_dir(&config, &inputs, Some(Path::new("/ws"))),
            PathBuf::from("/tmp/t/lambda")
        );
        let explicit = StackInputs {
            artifacts_dir: Some(PathBuf::from("/zips")),
            ..StackInputs::default()
        };
        assert_eq!(artifacts_dir(&config, &explicit, None), PathBuf::from("/zips"));
    }

    /// The SDK paths of the artifacts bucket on an intercepted S3 client.
    mod bucket {
        use std::sync::{Arc, Mutex};

        use aws_sdk_s3::Client;
        use aws_sdk_s3::operation::head_bucket::HeadBucketOutput;
        use aws_sdk_s3::operation::head_object::{HeadObjectError, HeadObjectOutput};
        use aws_sdk_s3::operation::put_object::PutObjectOutput;
        use aws_sdk_s3::types::ChecksumMode;
        use aws_sdk_s3::types::error::NotFound;
        use aws_smithy_mocks::{Rule, RuleMode, mock};
        use aws_smithy_runtime_api::http::{Response, StatusCode};
        use aws_smithy_types::body::SdkBody;

        use super::*;

        const OWNER: &str = "123456789012";
        const BUCKET: &str = "hck-artifacts-123456789012-us-east-1";

        fn client(rules: &[&Rule]) -> Client {
            aws_smithy_mocks::mock_client!(aws_sdk_s3, RuleMode::Sequential, rules.iter().copied())
        }

        /// One zip on disk, hashed as `locate` does.
        fn artifact(dir: &Path) -> Artifact {
            std::fs::create_dir_all(dir).unwrap();
            let path = dir.join("bootstrap.zip");
            std::fs::write(&path, b"the zip").unwrap();
            let (sha256, size) = hash_file(&path).unwrap();
            Artifact {
                package: "api".into(),
                parameter: "ApiCodeKey".into(),
                key: artifact_key("api", &sha256),
                path,
                sha256,
                size,
                state: ArtifactState::Local,
                note: None,
            }
        }

        /// HeadObject, as the kit must send it, answering `checksum`.
        fn head(checksum: Option<String>) -> Rule {
            mock!(Client::head_object)
                .match_requests(|r| {
                    r.bucket() == Some(BUCKET)
                        && r.expected_bucket_owner() == Some(OWNER)
                        && r.checksum_mode() == Some(&ChecksumMode::Enabled)
                })
                .then_output(move || {
                    HeadObjectOutput::builder()
                        .set_checksum_sha256(checksum.clone())
                        .build()
                })
        }

        fn head_absent() -> Rule {
            mock!(Client::head_object)
                .match_requests(|r| r.expected_bucket_owner() == Some(OWNER))
                .then_error(|| HeadObjectError::NotFound(NotFound::builder().build()))
        }

        /// PutObject with the expected owner and the content's SHA-256,
        /// recording the checksum it carried.
        fn put_ok(log: Arc<Mutex<Vec<String>>>) -> Rule {
            mock!(Client::put_object)
                .match_requests(|r| r.bucket() == Some(BUCKET) && r.expected_bucket_owner() == Some(OWNER))
                .then_compute_output(move |r| {
                    log.lock()
                        .unwrap()
                        .push(r.checksum_sha256().unwrap_or("none").to_owned());
                    PutObjectOutput::builder().build()
                })
        }

        fn dir(name: &str) -> PathBuf {
            std::env::temp_dir().join(format!("ops-cli-bucket-{name}-{}", std::process::id()))
        }

        #[test]
        fn the_s3_checksum_is_the_base64_of_the_key_digest() {
            // S3 documents ChecksumSHA256 as the base64 of the 32-byte digest.
            assert_eq!(
                sha256_base64(&sha256_hex(b"abc")),
                "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0="
            );
            let sha = sha256_hex(b"abc");
            assert_eq!(Remote::of(Some(&sha256_base64(&sha)), &sha), Remote::Verified);
            assert_eq!(Remote::of(None, &sha), Remote::NoChecksum);
            assert!(matches!(Remote::of(Some("AAAA"), &sha), Remote::Differs { .. }));
        }

        #[tokio::test]
        async fn an_object_with_the_same_checksum_is_not_uploaded_again() {
            let dir = dir("same");
            let mut artifacts = vec![artifact(&dir)];
            let rule = head(Some(sha256_base64(&artifacts[0].sha256)));
            upload(&client(&[&rule]), BUCKET, OWNER, &mut artifacts).await.unwrap();
            assert_eq!(artifacts[0].state, ArtifactState::Present);
            assert_eq!(artifacts[0].note, None);
            assert_eq!(rule.num_calls(), 1);
            std::fs::remove_dir_all(&dir).unwrap();
        }

        #[tokio::test]
        async fn an_object_without_a_checksum_is_uploaded_again_with_one() {
            let dir = dir("none");
            let mut artifacts = vec![artifact(&dir)];
            let log = Arc::<Mutex<Vec<String>>>::default();
            let (head, put) = (head(None), put_ok(log.clone()));
            upload(&client(&[&head, &put]), BUCKET, OWNER, &mut artifacts)
                .await
                .unwrap();
            assert_eq!(artifacts[0].state, ArtifactState::Replaced);
            assert!(
                artifacts[0].note.as_deref().unwrap().contains("no SHA-256"),
                "{:?}",
                artifacts[0].note
            );
            assert_eq!(*log.lock().unwrap(), vec![sha256_base64(&artifacts[0].sha256)]);
            std::fs::remove_dir_all(&dir).unwrap();
        }

        #[tokio::test]
        async fn an_object_with_another_checksum_is_replaced_and_reported() {
            let dir = dir("other");
            let mut artifacts = vec![artifact(&dir)];
            let log = Arc::<Mutex<Vec<String>>>::default();
            let swapped = sha256_base64(&sha256_hex(b"someone else's zip"));
            let (head, put) = (head(Some(swapped.clone())), put_ok(log.clone()));
            upload(&client(&[&head, &put]), BUCKET, OWNER, &mut artifacts)
                .await
                .unwrap();
            assert_eq!(artifacts[0].state, ArtifactState::Replaced);
            assert!(artifacts[0].note.as_deref().unwrap().contains(&swapped));
            assert_eq!(log.lock().unwrap().len(), 1);
            std::fs::remove_dir_all(&dir).unwrap();
        }

        #[tokio::test]
        async fn an_absent_object_is_uploaded_with_its_checksum() {
            let dir = dir("absent");
            let mut artifacts = vec![artifact(&dir)];
            let log = Arc::<Mutex<Vec<String>>>::default();
            let (head, put) = (head_absent(), put_ok(log.clone()));
            upload(&client(&[&head, &put]), BUCKET, OWNER, &mut artifacts)
                .await
                .unwrap();
            assert_eq!(artifacts[0].state, ArtifactState::Uploaded);
            assert_eq!(artifacts[0].note, None);
            assert_eq!(*log.lock().unwrap(), vec![sha256_base64(&artifacts[0].sha256)]);
            std::fs::remove_dir_all(&dir).unwrap();
        }

        #[tokio::test]
        async fn plan_marks_an_unverified_object_without_uploading() {
            let dir = dir("plan");
            let mut artifacts = vec![artifact(&dir)];
            let rule = head(None);
            check(&client(&[&rule]), BUCKET, OWNER, true, &mut artifacts)
                .await
                .unwrap();
            assert_eq!(artifacts[0].state, ArtifactState::Untrusted);
            assert!(artifacts[0].note.is_some());
            std::fs::remove_dir_all(&dir).unwrap();
        }

        #[tokio::test]
        async fn a_bucket_another_account_owns_is_refused() {
            // S3 answers 403 when ExpectedBucketOwner is not the owner.
            let rule = mock!(Client::head_bucket)
                .match_requests(|r| r.expected_bucket_owner() == Some(OWNER))
                .then_http_response(|| Response::new(StatusCode::try_from(403).unwrap(), SdkBody::empty()));
            let err = ensure_bucket(&client(&[&rule]), BUCKET, OWNER, "us-east-1")
                .await
                .unwrap_err();
            assert!(err.to_string().contains("not owned by account 123456789012"), "{err}");
        }

        #[tokio::test]
        async fn an_owned_bucket_is_used_as_it_is() {
            let rule = mock!(Client::head_bucket)
                .match_requests(|r| r.expected_bucket_owner() == Some(OWNER))
                .then_output(|| HeadBucketOutput::builder().build());
            assert!(
                !ensure_bucket(&client(&[&rule]), BUCKET, OWNER, "us-east-1")
                    .await
                    .unwrap()
            );
        }
    }
}
