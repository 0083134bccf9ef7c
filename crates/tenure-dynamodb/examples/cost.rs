//! Prints what a DynamoDB lease costs in requests at tenure's default term,
//! at kinsumer's lease age, and with kinsumer's own defaults.
//!
//! `cargo run -p tenure-dynamodb --example cost`

fn main() {
    let timing = match tenure::Config::default().validate() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    println!("tenure defaults:\n{}\n", timing.bounds());
    print!("{}", tenure_dynamodb::cost::comparison_table());
}
