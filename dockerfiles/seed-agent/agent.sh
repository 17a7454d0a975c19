#!/bin/bash
# The example agent from the seed's AGENTS.md ("Step 2: Implement ACP
# Protocol"), copied verbatim apart from this comment and one fix:
# - `$MESSAGE` is double-quoted inside the content update (the seed's
#   unquoted `'$MESSAGE'` is word-split and glob-expanded by the shell).
# Everything else (the unsolicited initialize answer with id 1, the string
# protocolVersion, `{accepted:true}` then `complete`, exit on cancel) is the
# seed dialect that kandev-acp must handle.
set -e

# ACP mode - JSON-RPC 2.0
if [ "$1" = "--acp" ]; then
    # Initialize response
    echo '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"1.0","serverInfo":{"name":"your-agent","version":"1.0.0"},"capabilities":{"streaming":true}}}'

    # Read requests from stdin
    while IFS= read -r line; do
        METHOD=$(echo "$line" | jq -r '.method')
        ID=$(echo "$line" | jq -r '.id')

        case "$METHOD" in
            "session/new")
                SESSION_ID=$(uuidgen)
                echo '{"jsonrpc":"2.0","id":'$ID',"result":{"sessionId":"'$SESSION_ID'"}}'
                ;;

            "session/prompt")
                MESSAGE=$(echo "$line" | jq -r '.params.message')

                # Accept prompt
                echo '{"jsonrpc":"2.0","id":'$ID',"result":{"accepted":true}}'

                # Send progress
                echo '{"jsonrpc":"2.0","method":"session/update","params":{"type":"content","data":{"text":"Processing: '"$MESSAGE"'"}}}'

                # Do work here
                sleep 2

                # Send completion
                echo '{"jsonrpc":"2.0","method":"session/update","params":{"type":"complete","data":{"sessionId":"'$SESSION_ID'","success":true}}}'
                ;;

            "session/cancel")
                # Handle cancellation
                exit 0
                ;;
        esac
    done
fi
