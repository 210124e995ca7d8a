/*
 * cmd-completion.c — `minfer completion bash|zsh`: a shell completion
 * script written from the command and option tables, so it always knows
 * exactly the options --help lists. The Debian package installs the bash
 * one (cmake/packaging.cmake).
 */
#include <stdio.h>
#include <string.h>

#include "cli-opts.h"
#include "commands.h"

static bool takes_path(const struct cli_opt *r)
{
    return r->arg && (!strcmp(r->arg, "FILE") || !strcmp(r->arg, "PATH"));
}

/* Each spelling of every row applying to bit, space-separated. */
static void spellings(FILE *f, unsigned bit, bool paths_only)
{
    for (unsigned k = 0; k < cli_opt_count; k++) {
        const struct cli_opt *r = &cli_opt_table[k];
        if (!(r->cmds & bit) || (paths_only && !takes_path(r)))
            continue;
        for (const char *p = r->names; *p; p++)
            fputc(*p == '|' ? ' ' : *p, f);
        fputc(' ', f);
    }
}

static void bash(FILE *f)
{
    fprintf(f, "# bash completion for minfer (minfer completion bash)\n"
               "_minfer() {\n"
               "    local cur=\"${COMP_WORDS[COMP_CWORD]}\" prev=\"${COMP_WORDS[COMP_CWORD-1]}\"\n"
               "    if [ \"$COMP_CWORD\" -eq 1 ]; then\n"
               "        COMPREPLY=($(compgen -W \"");
    for (unsigned i = 0; i < cli_command_count; i++)
        fprintf(f, "%s ", cli_commands[i].name);
    fprintf(f, "--help --version\" -- \"$cur\"))\n"
               "        return\n"
               "    fi\n"
               "    local opts='' paths=''\n"
               "    case \"${COMP_WORDS[1]}\" in\n");
    for (unsigned i = 0; i < cli_command_count; i++) {
        fprintf(f, "    %s) opts='", cli_commands[i].name);
        spellings(f, cli_commands[i].bit, false);
        fprintf(f, "'; paths='");
        spellings(f, cli_commands[i].bit, true);
        fprintf(f, "';;\n");
    }
    fprintf(f, "    esac\n"
               "    if [ \"${COMP_WORDS[1]}\" = completion ]; then\n"
               "        COMPREPLY=($(compgen -W 'bash zsh' -- \"$cur\"))\n"
               "        return\n"
               "    fi\n"
               "    case \" $paths \" in *\" $prev \"*)\n"
               "        COMPREPLY=($(compgen -f -- \"$cur\")); return;;\n"
               "    esac\n"
               "    if [[ \"$cur\" == -* ]]; then\n"
               "        COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
               "    else\n"
               "        COMPREPLY=($(compgen -f -- \"$cur\"))\n"
               "    fi\n"
               "}\n"
               "complete -o filenames -F _minfer minfer\n");
}

/* help text fit for a zsh _arguments description: first line, no []:' */
static void zsh_desc(FILE *f, const char *s)
{
    for (; *s && *s != '\n'; s++)
        if (!strchr("[]:'\\`$", *s))
            fputc(*s, f);
}

static void zsh(FILE *f)
{
    fprintf(f, "#compdef minfer\n# zsh completion for minfer (minfer completion zsh)\n"
               "_minfer() {\n"
               "    local -a cmds\n"
               "    cmds=(\n");
    for (unsigned i = 0; i < cli_command_count; i++) {
        fprintf(f, "        '%s:", cli_commands[i].name);
        zsh_desc(f, cli_commands[i].summary);
        fprintf(f, "'\n");
    }
    fprintf(f, "    )\n"
               "    if (( CURRENT == 2 )); then\n"
               "        _describe 'command' cmds\n"
               "        return\n"
               "    fi\n"
               "    case $words[2] in\n");
    for (unsigned i = 0; i < cli_command_count; i++) {
        fprintf(f, "    %s) _arguments", cli_commands[i].name);
        for (unsigned k = 0; k < cli_opt_count; k++) {
            const struct cli_opt *r = &cli_opt_table[k];
            if (!(r->cmds & cli_commands[i].bit))
                continue;
            for (const char *p = r->names; *p;) {
                const char *bar = strchr(p, '|');
                int n = bar ? (int)(bar - p) : (int)strlen(p);
                fprintf(f, " \\\n        '%.*s[", n, p);
                zsh_desc(f, r->help);
                fputc(']', f);
                if (r->arg)
                    fprintf(f, ":%s:%s", r->arg, takes_path(r) ? "_files" : "");
                fputc('\'', f);
                p += n + (bar ? 1 : 0);
            }
        }
        if (cli_commands[i].bit == CMD_COMPLETION)
            fprintf(f, " \\\n        '1:shell:(bash zsh)'");
        else
            fprintf(f, " \\\n        '*:file:_files'");
        fprintf(f, ";;\n");
    }
    fprintf(f, "    esac\n"
               "}\n"
               "_minfer \"$@\"\n");
}

int cmd_completion(int argc, char **argv)
{
    struct cli_args a = {"completion", CMD_COMPLETION, argc, argv, 1, "", false};
    const char *v, *shell = NULL;
    for (int id; (id = cli_next(&a, &v)) != CLI_END;) {
        if (id == OPT_HELP) {
            printf("usage: minfer completion bash|zsh\n"
                   "  bash: source <(minfer completion bash), or save it as\n"
                   "        ~/.local/share/bash-completion/completions/minfer\n"
                   "  zsh:  minfer completion zsh > \"${fpath[1]}/_minfer\"\n");
            cli_print_options(stdout, CMD_COMPLETION);
            return cli_stdout_done("completion");
        }
        if (id != CLI_POSITIONAL || shell)
            return id == CLI_BAD ? 2
                                 : cli_usage_error("completion", "unexpected argument '%s'",
                                                   v ? v : a.opt);
        shell = v;
    }
    if (!shell || (strcmp(shell, "bash") && strcmp(shell, "zsh")))
        return cli_usage_error("completion", "name a shell: bash or zsh");
    if (!strcmp(shell, "bash"))
        bash(stdout);
    else
        zsh(stdout);
    return cli_stdout_done("completion");
}
