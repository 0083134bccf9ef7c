//! The lease table itself: checking that it exists with tenure's key
//! schema, and creating it (on-demand billing) for a first run.

use std::time::Duration;

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    TableDescription, TableStatus,
};
use aws_sdk_dynamodb::Client;
use tenure::StoreError;

use crate::error::{classify, Failure, Target};
use crate::item::KEY;
use crate::retry::Throttle;

/// How long to wait for a new table to become active. DynamoDB usually
/// takes a few seconds; local servers none.
const CREATE_WAIT: Duration = Duration::from_secs(120);

/// How often to look while waiting.
const CREATE_POLL: Duration = Duration::from_millis(250);

/// What `DescribeTable` showed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// The table exists, is usable and has tenure's key schema.
    Ready,
    /// The table is still being created.
    Creating,
    /// There is no such table.
    Missing,
    /// The credentials may not describe tables; nothing can be checked
    /// before the first read.
    NotAllowed,
}

/// Looks at the table and checks its key schema and status.
pub(crate) async fn inspect(
    client: &Client,
    target: &Target,
    throttle: &Throttle,
) -> Result<Found, StoreError> {
    let described = throttle
        .run("describe", || async {
            match client
                .describe_table()
                .table_name(&target.table)
                .send()
                .await
            {
                Ok(out) => Ok(Ok(out.table)),
                Err(e) => match e.code() {
                    Some("ResourceNotFoundException") => Ok(Err(Found::Missing)),
                    Some("AccessDeniedException") => Ok(Err(Found::NotAllowed)),
                    _ => Err(classify(e, target, "table check")),
                },
            }
        })
        .await;
    let table = match described {
        Ok(Ok(table)) => table,
        Ok(Err(Found::NotAllowed)) => {
            tracing::info!(
                table = %target.table,
                "cannot check the lease table: the credentials lack dynamodb:DescribeTable; \
                 problems with the table will show on the first read"
            );
            return Ok(Found::NotAllowed);
        }
        Ok(Err(found)) => return Ok(found),
        Err(Failure::Other(e) | Failure::Throttled(e)) => return Err(e),
        Err(Failure::ConditionFailed) => return Err(unexpected(target)),
    };
    let Some(table) = table else {
        return Err(unexpected(target));
    };
    check_schema(&table, target)?;
    match table.table_status() {
        Some(TableStatus::Creating) => Ok(Found::Creating),
        Some(TableStatus::Active | TableStatus::Updating) | None => Ok(Found::Ready),
        Some(other) => Err(StoreError::Misconfigured {
            message: format!(
                "DynamoDB table {} {} is {}: it cannot serve leases until it is ACTIVE again; \
                 restore it or choose another table",
                target.table,
                target.place,
                other.as_str()
            ),
            source: None,
        }),
    }
}

/// Creates the table if it does not exist and waits until it is active.
/// Returns whether this call created it. Two processes racing to create it
/// both succeed.
pub(crate) async fn create_if_missing(
    client: &Client,
    target: &Target,
    throttle: &Throttle,
) -> Result<bool, StoreError> {
    match inspect(client, target, throttle).await? {
        Found::Ready => return Ok(false),
        Found::Creating => {
            wait_active(client, target, throttle).await?;
            return Ok(false);
        }
        Found::Missing | Found::NotAllowed => {}
    }
    let key = KeySchemaElement::builder()
        .attribute_name(KEY)
        .key_type(KeyType::Hash)
        .build()
        .map_err(|e| StoreError::misconfigured("building the key schema", e))?;
    let attr = AttributeDefinition::builder()
        .attribute_name(KEY)
        .attribute_type(ScalarAttributeType::S)
        .build()
        .map_err(|e| StoreError::misconfigured("building the key schema", e))?;
    let created = throttle
        .run("create", || async {
            match client
                .create_table()
                .table_name(&target.table)
                .key_schema(key.clone())
                .attribute_definitions(attr.clone())
                .billing_mode(BillingMode::PayPerRequest)
                .send()
                .await
            {
                Ok(_) => Ok(true),
                Err(e) => {
                    match e.code() {
                        // Another process created it first (or it is
                        // being created): fine, wait for it below.
                        Some("ResourceInUseException") => Ok(false),
                        _ => Err(classify(e, target, "table creation")),
                    }
                }
            }
        })
        .await
        .map_err(|f| match f {
            Failure::Other(e) | Failure::Throttled(e) => e,
            Failure::ConditionFailed => unexpected(target),
        })?;
    if created {
        tracing::info!(table = %target.table, place = %target.place, "created the lease table (on-demand billing)");
    }
    wait_active(client, target, throttle).await?;
    Ok(created)
}

async fn wait_active(
    client: &Client,
    target: &Target,
    throttle: &Throttle,
) -> Result<(), StoreError> {
    let start = tokio::time::Instant::now();
    loop {
        match inspect(client, target, throttle).await? {
            // Without DescribeTable the state cannot be seen; the first
            // read will tell.
            Found::Ready | Found::NotAllowed => return Ok(()),
            // Eventually consistent control plane: a just-created table can
            // briefly read as missing.
            Found::Creating | Found::Missing => {}
        }
        if start.elapsed() > CREATE_WAIT {
            return Err(StoreError::Unavailable {
                message: format!(
                    "DynamoDB table {} {} did not become ACTIVE within {CREATE_WAIT:?}; look at it in the console and retry",
                    target.table, target.place
                ),
                source: None,
            });
        }
        tokio::time::sleep(CREATE_POLL).await;
    }
}

/// The key schema must be exactly one hash key `group_name` of type S.
pub(crate) fn check_schema(table: &TableDescription, target: &Target) -> Result<(), StoreError> {
    let keys = table.key_schema();
    let type_of = |name: &str| {
        table
            .attribute_definitions()
            .iter()
            .find(|d| d.attribute_name() == name)
            .map_or_else(
                || "?".to_owned(),
                |d| d.attribute_type().as_str().to_owned(),
            )
    };
    let ok = match keys {
        [only] => {
            only.attribute_name() == KEY && only.key_type() == &KeyType::Hash && type_of(KEY) == "S"
        }
        _ => false,
    };
    if ok {
        return Ok(());
    }
    let found = keys
        .iter()
        .map(|k| {
            format!(
                "{} {} ({})",
                k.key_type().as_str(),
                k.attribute_name(),
                type_of(k.attribute_name())
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    Err(StoreError::Misconfigured {
        message: format!(
            "DynamoDB table {} {} has the key schema [{found}], but tenure needs exactly one key, the hash key \
             {KEY} of type S: choose another table name (with create=true tenure makes one), or migrate this table",
            target.table, target.place
        ),
        source: None,
    })
}

fn unexpected(target: &Target) -> StoreError {
    StoreError::Unavailable {
        message: format!(
            "DynamoDB {} answered the table check of {} with nothing usable",
            target.place, target.table
        ),
        source: None,
    }
}
